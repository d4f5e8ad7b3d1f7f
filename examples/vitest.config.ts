import { defineConfig } from 'vitest/config';
import { unitProject } from '../vitest.shared.js';

const unit = unitProject('examples');
export default defineConfig({
  test: { projects: [{ ...unit, test: { ...unit.test, include: ['*.test.ts'] } }] },
});

import { defineConfig } from 'vitest/config';
import { dbProject } from '../vitest.shared.js';

const e2e = dbProject('e2e', ['src/**/*.e2e.test.ts']);
export default defineConfig({
  test: { projects: [{ ...e2e, test: { ...e2e.test, testTimeout: 120_000, hookTimeout: 60_000 } }] },
});

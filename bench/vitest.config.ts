import { defineConfig } from 'vitest/config';
import { dbProject } from '../vitest.shared.js';

// Measurements run one file at a time, so they do not compete for the two cores.
export default defineConfig({
  test: {
    projects: [
      {
        ...dbProject('bench', ['src/**/*.measure.ts']),
        test: {
          ...dbProject('bench', ['src/**/*.measure.ts']).test,
          testTimeout: 600_000,
          fileParallelism: false,
        },
      },
    ],
  },
});

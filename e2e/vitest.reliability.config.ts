import { defineConfig } from 'vitest/config';
import { dbProject } from '../vitest.shared.js';

// `pnpm test:reliability` (CI profile) and `pnpm test:soak`: the fault-injection and gap-torture
// suites of docs/reliability.md. One file at a time: they measure, and the machine has two cores.
const suites = dbProject('reliability', ['src/**/*.reliability.test.ts']);
export default defineConfig({
  test: {
    projects: [
      {
        ...suites,
        test: { ...suites.test, testTimeout: 3_600_000, hookTimeout: 300_000, fileParallelism: false },
      },
    ],
  },
});

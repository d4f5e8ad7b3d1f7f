import { defineConfig } from 'vitest/config';
import { unitProject } from '../vitest.shared.js';

// `pnpm test:pack`: the packages packed, installed with npm into an app outside the repository, and
// the READMEs' examples run there. Not part of `pnpm test`: it needs the npm registry, and its
// type-checks and installs take a minute or two of the machine.
const pack = unitProject('pack');
export default defineConfig({
  test: {
    projects: [
      {
        ...pack,
        test: {
          ...pack.test,
          include: ['src/**/*.pack.test.ts'],
          testTimeout: 300_000,
          hookTimeout: 600_000,
        },
      },
    ],
  },
});

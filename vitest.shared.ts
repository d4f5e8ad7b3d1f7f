// Shared vitest presets. Every package's vitest.config.ts builds its projects from these, so
// timeouts, the source condition and the PostgreSQL global setup are decided in one place.
import { fileURLToPath } from 'node:url';
import { defaultServerConditions } from 'vite';
import { defineConfig, defineProject, type TestProjectInlineConfiguration } from 'vitest/config';

/** Resolve workspace packages to their TypeScript sources: tests never need a build. */
// Without 'module': vitest passes these to its workers as Node --conditions, and Node cannot load the
// extension-less ESM builds that 'module' selects (e.g. @opentelemetry/api under the OTel SDK).
const sourceConditions = ['@sluice/source', ...defaultServerConditions.filter((c) => c !== 'module')];

const resolveFromSource = {
  resolve: { conditions: sourceConditions },
  ssr: { resolve: { conditions: sourceConditions } },
  // vitest loads global setup files in its own `__vitest__` environment, which inherits neither.
  environments: { __vitest__: { resolve: { conditions: sourceConditions } } },
};

/** Pure tests (`*.test.ts`): no database, milliseconds each. */
export function unitProject(name: string): TestProjectInlineConfiguration {
  return defineProject({
    ...resolveFromSource,
    test: {
      name: `${name}:unit`,
      include: ['src/**/*.test.ts'],
      exclude: ['src/**/*.db.test.ts', '**/node_modules/**'],
      testTimeout: 10_000,
    },
  });
}

/**
 * Tests against real PostgreSQL (`*.db.test.ts`). One server per test run (started by the global
 * setup of `@sluice/testing`), one database per test file cloned from a migrated template.
 */
export function dbProject(name: string, include = ['src/**/*.db.test.ts']): TestProjectInlineConfiguration {
  return defineProject({
    ...resolveFromSource,
    test: {
      name: `${name}:db`,
      include,
      globalSetup: [fileURLToPath(new URL('./packages/testing/src/vitest/global-setup.ts', import.meta.url))],
      testTimeout: 30_000,
      hookTimeout: 30_000,
    },
  });
}

/**
 * A package's vitest config: its unit and database projects. The source conditions are set at the
 * root too, because global setup files are loaded by the root project's module runner.
 */
export function packageConfig(name: string) {
  return defineConfig({
    ...resolveFromSource,
    test: { passWithNoTests: true, projects: [unitProject(name), dbProject(name)] },
  });
}

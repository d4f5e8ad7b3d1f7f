// `@sluice/testing/vitest`: the helpers that need vitest (its inject() and afterAll()). The root
// entry never imports vitest, so `startPostgres()` works in any script or test runner.
export { useTestDatabase } from './test-database.js';

export type { TestDatabase } from './test-database.js';

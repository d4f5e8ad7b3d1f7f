// `@sluice/testing/vitest`: the helpers that need vitest (its inject(), afterAll() and
// onTestFinished()). The root entry never imports vitest, so `startPostgres()` works in any script or
// test runner.
export { listening } from './listening.js';
export { useLoginRole } from './login-role.js';
export { heldTransaction, registeredDispatcher, testDispatcher } from './test-dispatcher.js';
export { setDatabaseSettings, useTestDatabase } from './test-database.js';

export type { Listening } from './listening.js';
export type { TestDatabase } from './test-database.js';

// `@sluice/testing`: PostgreSQL for tests and helpers around a dispatcher. Nothing here imports
// vitest (its hooks are in `@sluice/testing/vitest`), and the PostgreSQL providers load their
// packages only when they are used.
export { capturingLogger, listenBackends } from './capturing-logger.js';
export { consumerRow, freshSchema } from './consumer-row.js';
export { withDatabase } from './database-url.js';
export { postgresJsMajor } from './driver.js';
export { drainUntilIdle, passUntil } from './drain.js';
export { appendEvents, failingOn, recordingConsumer } from './fixtures.js';
export { recordNotifications } from './notification-recorder.js';
export { holdGap, openTransaction } from './open-transaction.js';
export { embeddedServer, EmbeddedServerError } from './providers/embedded.js';
export { startPostgres } from './start-postgres.js';
export { gate, until, untilWaitingForConsumerRow } from './until.js';

export type { CapturedLine } from './capturing-logger.js';
export type { ConsumerRow } from './consumer-row.js';
export type { DrainOptions } from './drain.js';
export type { RecordingConsumer } from './fixtures.js';
export type { EmbeddedServer, EmbeddedServerOptions } from './providers/embedded.js';
export type { NotificationRecorder } from './notification-recorder.js';
export type { HeldGap, OpenTransaction } from './open-transaction.js';
export type { PostgresServer, StartPostgresOptions } from './start-postgres.js';

export { withDatabase } from './database-url.js';
export { embeddedServer } from './providers/embedded.js';
export { recordNotifications } from './notification-recorder.js';
export { startPostgres } from './start-postgres.js';
export { useTestDatabase } from './test-database.js';

export type { EmbeddedServer, EmbeddedServerOptions } from './providers/embedded.js';
export type { NotificationRecorder } from './notification-recorder.js';
export type { PostgresServer, StartPostgresOptions } from './start-postgres.js';
export type { TestDatabase } from './test-database.js';

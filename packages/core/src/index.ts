export { append, transaction } from './append.js';
export {
  ERROR_CODES,
  InvalidEventError,
  InvalidOptionError,
  MigrationFailedError,
  MigrationModifiedError,
  PostgresUnsupportedError,
  SchemaNotMigratedError,
  SequenceCachedError,
  SluiceError,
  XidGuardMissingError,
} from './errors.js';
export { consoleLogger, silentLogger } from './logger.js';
export { migrate } from './schema/migrate.js';
export { DEFAULT_SCHEMA, resolveSchemaName } from './schema/schema-name.js';
export { tables } from './schema/tables.js';
export { MINIMUM_SERVER_VERSION_NUM, verifySchema } from './schema/verify-schema.js';
export { wakeUpChannel } from './wake-up/channel.js';
export { wakeUpNotifierFor } from './wake-up/wake-up-notifier.js';

export type { AppendOptions, WakeUpMode } from './append.js';
export type { SluiceErrorCode } from './errors.js';
export type { EventRecord, JsonObject, NewEvent } from './events.js';
export type { Logger } from './logger.js';
export type { MigrateOptions, MigrateResult } from './schema/migrate.js';
export type { Tables } from './schema/tables.js';
export type { VerifySchemaOptions, VerifySchemaResult } from './schema/verify-schema.js';
export type { Queryable, Sql, TransactionSql } from './sql-types.js';
export type { WakeUpNotifier, WakeUpNotifierOptions } from './wake-up/wake-up-notifier.js';

export { append, transaction } from './append.js';
export { defineConsumer } from './consumers/consumer.js';
export { RESERVED_TYPE_PREFIX, TOMBSTONE_TYPE } from './events.js';
export { createDispatcher, DispatcherNotRegisteredError } from './dispatcher/create-dispatcher.js';
export {
  BelowRetentionFloorError,
  BeyondHeadError,
  ConnectTimeoutError,
  ConsumerBusyError,
  ConsumerNotFoundError,
  DeadLetterNotFoundError,
  ERROR_CODES,
  EventNotFoundError,
  GapHeldError,
  NotAGapError,
  SkipMismatchError,
  InvalidEventError,
  InvalidOptionError,
  MigrationFailedError,
  MigrationModifiedError,
  PostgresUnsupportedError,
  PruneBlockedError,
  SchemaNotMigratedError,
  SequenceCachedError,
  SluiceError,
  XidGuardMissingError,
  messageOf,
  sqlStateOf,
} from './errors.js';
export { checkConnection, connectTimeoutMsOf, withinConnectTimeout } from './connect-timeout.js';
export { consoleLogger, silentLogger } from './logger.js';
export { DEFAULTS, SHARED_INSTANCE_ID } from './options.js';
export { lockConsumer, lockConsumerForOperator, RETENTION_LOCK_CLASS } from './queries/consumers.js';
export { writeAudit } from './queries/audit.js';
export { guardedBegin, TransactionAbandonedError } from './connections/guarded-transaction.js';
export { logUnprepared, openOwnConnections } from './connections/own-connections.js';
export { pgArray } from './queries/pg-array.js';
export { listRanges } from './queries/gaps.js';
export { prune } from './retention/prune.js';
export { retentionFloor } from './queries/audit.js';
export { migrate } from './schema/migrate.js';
export { DEFAULT_SCHEMA, resolveSchemaName } from './schema/schema-name.js';
export { tables } from './schema/tables.js';
export { MINIMUM_SERVER_VERSION_NUM, verifySchema } from './schema/verify-schema.js';
export { ATTR, METRIC } from './telemetry/attributes.js';
export { parseSnapshot } from './gaps/snapshot.js';
export { wakeUpChannel } from './wake-up/channel.js';
export { wakeUpNotifierFor } from './wake-up/wake-up-notifier.js';

export type { AppendOptions, WakeUpMode } from './append.js';
export type { Consumer, ErrorPolicy, HandlerContext } from './consumers/consumer.js';
export type { OwnConnections, OwnConnectionsSettings } from './connections/own-connections.js';
export type { Dispatcher } from './dispatcher/create-dispatcher.js';
export type { ConsumerPassResult, ConsumerSkip, PassResult } from './dispatcher/pass.js';
export type { SluiceErrorCode } from './errors.js';
export type { EventRecord, JsonObject, NewEvent } from './events.js';
export type { GapRange, Ordering } from './gaps/gaps.js';
export type { Logger } from './logger.js';
export type { DispatcherOptions } from './options.js';
export type { AuditEntry } from './queries/audit.js';
export type { ConsumerStateRow, OperatorRow } from './queries/consumers.js';
export type { StoredRange } from './queries/gaps.js';
export type { PruneOptions, PruneResult } from './retention/prune.js';
export type { MigrateOptions, MigrateResult } from './schema/migrate.js';
export type { Tables } from './schema/tables.js';
export type { VerifySchemaOptions, VerifySchemaResult } from './schema/verify-schema.js';
export type { Queryable, Sql, TransactionSql } from './sql-types.js';
export type { WakeUpNotifier, WakeUpNotifierOptions } from './wake-up/wake-up-notifier.js';

// The public API of @sluice/core: every name here is listed, with what it is, in
// packages/core/README.md ("API"), and api.test.ts keeps the two equal. What Sluice's own packages
// share beyond it lives in ./internal.ts (`@sluice/core/internal`), which is not a public API.
export { append, transaction } from './append.js';
export { checkConnection } from './connect-timeout.js';
export { defineConsumer } from './consumers/consumer.js';
export { createDispatcher } from './dispatcher/create-dispatcher.js';
export {
  BelowRetentionFloorError,
  BeyondHeadError,
  ConnectTimeoutError,
  ConsumerBusyError,
  ConsumerNotFoundError,
  DeadLetterNotFoundError,
  DispatcherNotRegisteredError,
  DispatcherStoppedError,
  ERROR_CODES,
  EventNotFoundError,
  GapHeldError,
  InvalidEventError,
  EventsNotStoredError,
  InvalidOptionError,
  KeyNotParkedError,
  LaneChangeInProgressError,
  MigrationFailedError,
  MigrationModifiedError,
  NotAGapError,
  PostgresUnsupportedError,
  PruneBlockedError,
  RebuildNotFoundError,
  RebuildNotReadyError,
  RebuildStateError,
  SchemaNotMigratedError,
  SequenceCachedError,
  SkipMismatchError,
  SluiceError,
  TransactionAbandonedError,
  TransactionControlError,
  XidGuardMissingError,
} from './errors.js';
export { RESERVED_TYPE_PREFIX, TOMBSTONE_TYPE } from './events.js';
export { liveVersion } from './live-version.js';
export { consoleLogger, silentLogger } from './logger.js';
export { DEFAULTS } from './options.js';
export { prune } from './retention/prune.js';
export { migrate } from './schema/migrate.js';
export { DEFAULT_SCHEMA } from './schema/tables.js';
export { verifySchema } from './schema/verify-schema.js';
export { ATTR, METRIC } from './telemetry/attributes.js';

export type { AppendOptions, WakeUpMode } from './append.js';
export type { Consumer, ErrorPolicy, HandlerContext, RebuildOptions } from './consumers/consumer.js';
export type { Dispatcher } from './dispatcher/create-dispatcher.js';
export type { ConsumerPassResult, ConsumerSkip, PassResult } from './dispatcher/pass.js';
export type { CliErrorCode, OpsRouteErrorCode, SluiceErrorCode } from './errors.js';
export type { EventRecord, JsonObject, NewEvent } from './events.js';
export type { Ordering } from './gaps/gaps.js';
export type { Logger } from './logger.js';
export type { DispatcherOptions } from './options.js';
export type { PruneOptions, PruneResult } from './retention/prune.js';
export type { MigrateOptions, MigrateResult } from './schema/migrate.js';
export type { VerifySchemaOptions, VerifySchemaResult } from './schema/verify-schema.js';
export type { Queryable, Sql, TransactionSql } from './sql-types.js';

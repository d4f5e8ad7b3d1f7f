// @sluice/core/internal: the plumbing Sluice's own packages share (@sluice/admin, @sluice/fastify,
// @sluice/testing, and this repository's e2e suites and bench). It is not a public API: nothing
// here is documented for applications, and any of it may change in any release. Applications use
// the package root (`@sluice/core`), whose every export is listed in packages/core/README.md.
export { connectTimeoutMsOf, isNotPostgres, withinConnectTimeout } from './connect-timeout.js';
export { guardedBegin } from './connections/guarded-transaction.js';
export { logUnprepared, openOwnConnections } from './connections/own-connections.js';
export {
  type ConsumerState,
  consumerStateOf,
  type ConsumerStatus,
  disableConsumer,
  enableConsumer,
  fenceGap,
  type InFlightAt,
  type OperatorAction,
  type OperatorChange,
  replayDeadLetters,
  restartConsumer,
  type RestartFrom,
  type RowChange,
  skipEvent,
  stuckEventOf,
} from './consumer-state/consumer-state.js';
export { poolerHint, unreachableBy } from './dispatcher/classify-failure.js';
export { MAX_PARKED_KEY_BYTES } from './dispatcher/deliver.js';
export { messageOf, sqlStateOf } from './errors.js';
export { neverThrowing } from './logger.js';
export { MAX_SHOWN_DEPTH, toShownJson } from './json-shown.js';
export { settleWithin, TIMED_OUT } from './time-limit.js';
export { parseSnapshot } from './gaps/gaps.js';
export { retentionFloor, writeAudit } from './queries/audit.js';
export { lockConsumer, lockConsumerForOperator, RETENTION_LOCK_CLASS } from './queries/consumers.js';
export { listRanges } from './queries/gaps.js';
export {
  applyOperatorChange,
  copySkippedEvent,
  insertTombstone,
  isPendingGap,
  missingDeadLetters,
  readDisableEnd,
  readRestartFacts,
  requestReplays,
  selectReplays,
} from './queries/operator.js';
export { eventFromRow, type EventRow } from './queries/events.js';
export { pgArray } from './queries/pg-array.js';
export { laneCountsOf, requestLaneChange } from './queries/lanes.js';
export { deleteParkedKey, laneOwning, lockParkedKey, requestParkedReplay } from './queries/parked.js';
export { isSharedInstanceId, laneInstanceIds, parseLaneInstanceId } from './lanes/lanes.js';
export { collectStaleInstances } from './queries/stale-instances.js';
export {
  APPROVE_WITHIN_DEFAULT,
  beginTakeover,
  changeRebuild,
  completeTakeover,
  dropVersion,
  rebuildProgress,
  refuseRetiredRows,
  selectVersions,
} from './queries/versions.js';
export { resolveSchemaName } from './schema/tables.js';
export { tables } from './schema/tables.js';
export { MINIMUM_SERVER_VERSION_NUM } from './schema/verify-schema.js';
export {
  ADMIN_DEFAULTS,
  MAX_AGE_MS,
  MAX_LOCK_TIMEOUT_MS,
  MAX_MS,
  optionsObject,
  requirePool,
  SHARED_INSTANCE_ID,
} from './options.js';
export { wakeUpChannel } from './wake-up/channel.js';
export { wakeUpNotifierFor } from './wake-up/wake-up-notifier.js';

export type { GapRange } from './gaps/gaps.js';
export type { AuditEntry } from './queries/audit.js';
export type { OwnConnections, OwnConnectionsSettings } from './connections/own-connections.js';
export type { ConsumerStateRow, OperatorRow } from './queries/consumers.js';
export type { StoredRange } from './queries/gaps.js';
export type { OperatorTarget, RestartFacts } from './queries/operator.js';
export type { CollectedInstance } from './queries/stale-instances.js';
export type { LaneChangeRequest } from './queries/lanes.js';
export type {
  DroppedVersion,
  RebuildProgress,
  VersionChange,
  VersionRow,
  VersionState,
} from './queries/versions.js';
export type { Lane, LaneKey } from './lanes/lanes.js';
export type { Tables } from './schema/tables.js';
export type { WakeUpNotifier, WakeUpNotifierOptions } from './wake-up/wake-up-notifier.js';

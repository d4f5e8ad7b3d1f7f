export { createAdmin } from './create-admin.js';
export { parseEventId } from './validate.js';

export type { Admin, AdminOptions } from './create-admin.js';
export type { StaleInstance } from './actions/collect-stale-instances.js';
export type { FenceOptions } from './actions/fence-gap.js';
export type { ParkedKeyOptions, ParkedKeyResult, RelaneOptions } from './actions/parked-keys.js';
export type {
  ApproveOptions,
  DropVersionOptions,
  RebuildActionOptions,
  RebuildStatus,
} from './actions/rebuilds.js';
export type { ReplayOptions, ReplayResult } from './actions/replay-dead-letters.js';
export type { RestartOptions } from './actions/restart.js';
export type { ActionOptions, ActionResult } from './context.js';
export type { DisableOptions, DisableResult } from './actions/set-enabled.js';
export type { SkipOptions } from './actions/skip-poison.js';
export type { Backend, Diagnosis } from './diagnose.js';
export type {
  AuditRecord,
  ConsumerDetail,
  ConsumerEvent,
  ConsumerStatus,
  ConsumerSummary,
  DeadLetter,
  ParkedEvent,
  ParkedKey,
} from './read-models.js';
// Types the actions above return or take, defined in core's plumbing: named here so an application
// can import them from the package it calls.
export type {
  ConsumerState,
  DroppedVersion,
  LaneChangeRequest,
  RestartFrom,
  StoredRange,
  VersionChange,
} from '@sluice/core/internal';

// Rebuilds of a consumer's versions (docs/design.md §12): status, approval of the takeover, pause,
// resume, abandon, and dropping a retired version's data. Each action is audited by core.
import { ConsumerBusyError, ConsumerNotFoundError, InvalidOptionError } from '@sluice/core';
import {
  beginTakeover,
  changeRebuild,
  dropVersion as dropCoreVersion,
  rebuildProgress,
  selectVersions,
  sqlStateOf,
  type DroppedVersion,
  type RebuildProgress,
  type VersionChange,
  type VersionRow,
} from '@sluice/core/internal';
import type { AdminContext } from '../context.js';
import { checkActor, checkName } from '../validate.js';

export interface RebuildActionOptions {
  /** The version acted on; by default the one on its way (there is at most one). */
  readonly version?: number;
  /** Who acts, for the audit. @defaultValue the admin's defaultActor */
  readonly actor?: string;
  /** Free text kept in the audit. */
  readonly reason?: string;
}

export interface ApproveOptions extends RebuildActionOptions {
  /**
   * Approve even while the rebuild is further behind the head than it takes over within (its
   * `rebuild.takeover.withinEvents`, else 1,000): the live version stops at once and serves stale
   * data until the rebuild reaches the barrier. @defaultValue false
   */
  readonly force?: boolean;
}

/** A consumer's versions and its rebuild in progress, as the dashboard and the CLI show them. */
export interface RebuildStatus {
  readonly consumer: string;
  readonly versions: readonly VersionRow[];
  /** The version on its way to take over, with its progress; null when none is. */
  readonly rebuild: RebuildProgress | null;
}

/**
 * Every versioned consumer (or only `name`) with its versions and the progress of its rebuild.
 * @throws {InvalidOptionError}
 */
export async function rebuildStatus(ctx: AdminContext, nameInput?: string): Promise<RebuildStatus[]> {
  const name = nameInput === undefined ? undefined : checkName(nameInput, 'name');
  const versions = await selectVersions(ctx.sql, ctx.tables, name === undefined ? undefined : [name]);
  if (name !== undefined && versions.length === 0) {
    const [row] = await ctx.sql`select 1 from ${ctx.tables.consumers} where name = ${name} limit 1`;
    if (!row) throw new ConsumerNotFoundError(name);
  }
  const progress = await rebuildProgress(ctx.sql, ctx.tables, name);
  const names = [...new Set(versions.map((v) => v.consumerName))];
  return names.map((consumer) => ({
    consumer,
    versions: versions.filter((v) => v.consumerName === consumer),
    rebuild: progress.find((p) => p.consumer === consumer) ?? null,
  }));
}

/**
 * Approves the takeover of the rebuild of `name` (docs/design.md §12.3): the live version stops at
 * the barrier and the rebuild becomes live once it has reached it (at once when it already has; a
 * version with side effects takes the rows over at once). Refused while the rebuild is too far
 * behind, unless forced.
 * @throws {RebuildNotFoundError} @throws {RebuildStateError} @throws {RebuildNotReadyError}
 * @throws {ConsumerBusyError} @throws {InvalidOptionError}
 */
export async function approveRebuild(
  ctx: AdminContext,
  nameInput: string,
  options: ApproveOptions = {},
): Promise<VersionChange> {
  const name = checkName(nameInput, 'name');
  const version = checkVersion(options.version);
  const who = checkActor(options, ctx.defaultActor);
  if (options.force !== undefined && typeof options.force !== 'boolean') {
    throw new InvalidOptionError('force', 'must be a boolean');
  }
  return busy(name, ctx, () =>
    beginTakeover(ctx.sql, ctx.tables, ctx.schema, name, {
      actor: who.actor,
      ...(version === undefined ? {} : { version }),
      // Without force: the version's declared distance (read under the takeover's lock), else
      // APPROVE_WITHIN_DEFAULT.
      within: options.force === true ? null : 'declared',
      lockTimeoutMs: ctx.lockTimeoutMs,
      ...(who.reason === null ? {} : { reason: who.reason }),
    }),
  );
}

/** Pauses the rebuild of `name`: its rows stop until it is resumed. */
export async function pauseRebuild(
  ctx: AdminContext,
  nameInput: string,
  options: RebuildActionOptions = {},
): Promise<VersionChange> {
  return onRebuild(ctx, nameInput, 'pause', options);
}

/** Resumes a paused rebuild of `name`. */
export async function resumeRebuild(
  ctx: AdminContext,
  nameInput: string,
  options: RebuildActionOptions = {},
): Promise<VersionChange> {
  return onRebuild(ctx, nameInput, 'resume', options);
}

/**
 * Abandons the rebuild of `name`: its rows (and their gaps, crash records and dead letters) are
 * removed and it is not run again; a live version its takeover had stopped goes on.
 */
export async function abandonRebuild(
  ctx: AdminContext,
  nameInput: string,
  options: RebuildActionOptions = {},
): Promise<VersionChange> {
  return onRebuild(ctx, nameInput, 'abandon', options);
}

export interface DropVersionOptions {
  /** Who acts, for the audit. @defaultValue the admin's defaultActor */
  readonly actor?: string;
  /** Free text kept in the audit. */
  readonly reason?: string;
  /** Drop the table the version declared as its liveView source too. @defaultValue false */
  readonly dropSource?: boolean;
}

/**
 * Drops a retired version's data (docs/design.md §12.4): its consumer rows and, with dropSource,
 * its liveView source table. The one way Sluice removes a version's data.
 * @throws {RebuildNotFoundError} @throws {RebuildStateError} @throws {InvalidOptionError}
 */
export async function dropVersion(
  ctx: AdminContext,
  nameInput: string,
  versionInput: number,
  options: DropVersionOptions = {},
): Promise<DroppedVersion> {
  const name = checkName(nameInput, 'name');
  const version = checkVersion(versionInput);
  if (version === undefined)
    throw new InvalidOptionError('version', 'is required: the retired version to drop');
  const who = checkActor(options, ctx.defaultActor);
  if (options.dropSource !== undefined && typeof options.dropSource !== 'boolean') {
    throw new InvalidOptionError('dropSource', 'must be a boolean');
  }
  return busy(name, ctx, () =>
    dropCoreVersion(ctx.sql, ctx.tables, name, version, {
      actor: who.actor,
      dropSource: options.dropSource === true,
      lockTimeoutMs: ctx.lockTimeoutMs,
      ...(who.reason === null ? {} : { reason: who.reason }),
    }),
  );
}

async function onRebuild(
  ctx: AdminContext,
  nameInput: string,
  action: 'pause' | 'resume' | 'abandon',
  options: RebuildActionOptions = {},
): Promise<VersionChange> {
  const name = checkName(nameInput, 'name');
  const version = checkVersion(options.version);
  const who = checkActor(options, ctx.defaultActor);
  return busy(name, ctx, () =>
    changeRebuild(ctx.sql, ctx.tables, name, action, {
      actor: who.actor,
      ...(version === undefined ? {} : { version }),
      ...(who.reason === null ? {} : { reason: who.reason }),
      lockTimeoutMs: ctx.lockTimeoutMs,
    }),
  );
}

/** A row held by a turn past lockTimeoutMs: ConsumerBusyError, nothing changed. */
async function busy<T>(name: string, ctx: AdminContext, action: () => Promise<T>): Promise<T> {
  try {
    return await action();
  } catch (error) {
    if (sqlStateOf(error) === '55P03') throw new ConsumerBusyError(name, ctx.lockTimeoutMs);
    throw error;
  }
}

function checkVersion(value: unknown): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1 || value > 2_147_483_647) {
    throw new InvalidOptionError('version', 'must be an integer from 1 to 2147483647');
  }
  return value;
}

import { ConsumerBusyError, InvalidOptionError, KeyNotParkedError } from '@sluice/core';
import {
  deleteParkedKey,
  MAX_PARKED_KEY_BYTES,
  laneOwning,
  lockParkedKey,
  refuseRetiredRows,
  requestLaneChange,
  requestParkedReplay,
  writeAudit,
  type LaneChangeRequest,
} from '@sluice/core/internal';
import { assertRegistered, choosingLanes, withLockedConsumer, type AdminContext } from '../context.js';
import { checkActor, checkName, checkText } from '../validate.js';

export interface ParkedKeyOptions {
  /** The parked key (a stream id, or the consumer's laneKey field). */
  readonly key: string;
  /** Who acts, for the audit. @defaultValue the admin's defaultActor */
  readonly actor?: string;
  /** Free text kept in the audit. */
  readonly reason?: string;
}

/** What an action on a parked key did. */
export interface ParkedKeyResult {
  readonly consumer: string;
  readonly key: string;
  readonly action: 'replay-parked-key' | 'drop-parked-key';
  /** The key's parked events when the action took it. */
  readonly events: number;
  /** The lane that owns the key (and replays it): '*', or '*k/N'. */
  readonly lane: string;
}

/**
 * Asks for a parked key's events to be delivered again, in id order, by the next turn of the lane
 * that owns the key (docs/design.md §11.4): one attempt each; once they have all gone through, the
 * key is no longer parked and its later events flow as usual. One that fails again parks the key
 * again from that event on. Takes the owning lane's row lock, as the dispatcher does. Audited.
 * @throws {KeyNotParkedError} @throws {ConsumerNotFoundError} @throws {ConsumerBusyError}
 */
export async function replayParkedKey(
  ctx: AdminContext,
  nameInput: string,
  options: ParkedKeyOptions = {} as ParkedKeyOptions,
): Promise<ParkedKeyResult> {
  return onParkedKey(ctx, nameInput, options, 'replay-parked-key');
}

/**
 * Gives a parked key up: deletes its parked events (they are not delivered) and unparks it, so
 * its later events flow again. Takes the owning lane's row lock. Audited, with the count.
 * @throws {KeyNotParkedError} @throws {ConsumerNotFoundError} @throws {ConsumerBusyError}
 */
export async function dropParkedKey(
  ctx: AdminContext,
  nameInput: string,
  options: ParkedKeyOptions = {} as ParkedKeyOptions,
): Promise<ParkedKeyResult> {
  return onParkedKey(ctx, nameInput, options, 'drop-parked-key');
}

async function onParkedKey(
  ctx: AdminContext,
  nameInput: string,
  options: ParkedKeyOptions = {} as ParkedKeyOptions,
  action: ParkedKeyResult['action'],
): Promise<ParkedKeyResult> {
  const name = checkName(nameInput, 'name');
  const key = checkKey(options.key);
  const who = checkActor(options, ctx.defaultActor);
  return choosingLanes(ctx, name, async (last) => {
    // The lane that owns the key now: the one whose turns park and replay it.
    const lane = await laneOwning(ctx.sql, ctx.tables, name, key);
    if (lane === undefined) {
      // No shared row: a per-instance consumer parks no key (or none is registered at all).
      await assertRegistered(ctx.sql, ctx, name);
      throw new KeyNotParkedError(name, key);
    }
    return withLockedConsumer(ctx, name, lane, async ({ tx, state }) => {
      // Asked again once the lane is held: a change of lane count that switched since has handed
      // the key to a new lane, whose turns this lock would not keep out.
      if ((await laneOwning(tx, ctx.tables, name, key)) !== lane) {
        if (last) throw new ConsumerBusyError(name, ctx.lockTimeoutMs, true);
        return undefined;
      }
      const parked = await lockParkedKey(tx, ctx.tables, name, key);
      if (!parked) throw new KeyNotParkedError(name, key);
      if (action === 'replay-parked-key') await requestParkedReplay(tx, ctx.tables, name, key, who.actor);
      else await deleteParkedKey(tx, ctx.tables, name, key);
      await writeAudit(tx, ctx.tables, {
        actor: who.actor,
        action,
        consumerName: name,
        instanceId: lane,
        cursorBefore: state.cursor,
        cursorAfter: state.cursor,
        details: { key, events: parked.events, reason: who.reason },
      });
      return { consumer: name, key, action, events: parked.events, lane };
    });
  });
}

export interface RelaneOptions {
  /** The lane count to change to, 1–1024. */
  readonly lanes: number;
  readonly actor?: string;
  readonly reason?: string;
}

/**
 * Changes a shared consumer's lane count while it runs (docs/design.md §11.3): its old lanes deliver
 * up to a common barrier, the new ones go on from there; nothing is lost and order per key is kept.
 * Audited. A change not switched over yet is retargeted (or cancelled, back to the old count).
 * @throws {LaneChangeInProgressError} while a switched change still drains
 * @throws {InvalidOptionError} @throws {RebuildStateError} on a retired version's rows
 */
export async function relane(
  ctx: AdminContext,
  nameInput: string,
  options: RelaneOptions = {} as RelaneOptions,
): Promise<LaneChangeRequest> {
  const name = checkName(nameInput, 'name');
  const who = checkActor(options, ctx.defaultActor);
  // A retired version's rows are never turned: a change of their lanes would never drain.
  await refuseRetiredRows(ctx.sql, ctx.tables, name);
  return requestLaneChange(ctx.sql, ctx.tables, ctx.schema, name, options.lanes, who.actor);
}

function checkKey(value: unknown): string {
  const key = checkText(value, 'key', MAX_PARKED_KEY_BYTES);
  if (key === undefined) throw new InvalidOptionError('key', 'is required: the parked key to act on');
  return key;
}

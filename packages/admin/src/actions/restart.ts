import {
  BeyondHeadError,
  BelowRetentionFloorError,
  InvalidOptionError,
  RETENTION_LOCK_CLASS,
  retentionFloor,
  writeAudit,
} from '@sluice/core';
import { withLockedConsumer, type AdminContext } from '../context.js';
import { optionalName } from '../read-models.js';
import { checkEventId, checkName, checkText } from '../validate.js';
import type { ActionOptions, ActionResult } from './result.js';

export interface RestartOptions extends ActionOptions {
  /** 'beginning' (the oldest kept event), 'now' (the log head), or the id after which to continue. */
  readonly from: 'beginning' | 'now' | bigint;
}

/**
 * Moves the cursor (docs/design.md §6.2): to the beginning, to now, or to a given id, and clears attempts,
 * pending gaps, crash records and the re-arm budget. A dead consumer becomes idle; a disabled one
 * stays disabled. Refuses to start below the retention floor (pruned events would be skipped).
 * @throws {InvalidOptionError} @throws {ConsumerNotFoundError} @throws {ConsumerBusyError}
 * @throws {BelowRetentionFloorError} @throws {BeyondHeadError}
 */
export async function restart(
  ctx: AdminContext,
  nameInput: string,
  options: RestartOptions,
): Promise<ActionResult> {
  const name = checkName(nameInput, 'name');
  const from = options.from as unknown;
  if (
    from !== 'beginning' &&
    from !== 'now' &&
    !(from === 0n || (typeof from === 'bigint' && checkEventId(from, 'from')))
  ) {
    throw new InvalidOptionError('from', "must be 'beginning', 'now' or a bigint event id (0 or more)");
  }
  const reason = checkText(options.reason, 'reason');
  const actor = checkText(options.actor, 'actor', 200) ?? ctx.defaultActor;
  const t = ctx.tables;
  return withLockedConsumer(ctx, name, optionalName(options.instanceId), async ({ tx, row, instanceId }) => {
    // Shared retention lock: no prune can delete what the new cursor still needs meanwhile.
    await tx`select pg_advisory_xact_lock_shared(${RETENTION_LOCK_CLASS}, hashtext(${ctx.schema}))`;
    const floor = await retentionFloor(tx, t);
    const [state] = await tx<{ head: string; snap: string }[]>`
      select coalesce((select max(id) from ${t.events}), 0)::text as head, pg_current_snapshot()::text as snap`;
    if (!state) throw new Error('restart: no state row');
    // 'now' remembers the events in flight at that snapshot, and delivers them once every
    // transaction then running has ended: once the horizon passes a fence allocated after the
    // snapshot. This transaction's own xid is not one (its row lock drew it before the snapshot, and
    // a writer that began in between would have a higher one): a fresh xid, drawn by an autocommit
    // statement now, is (docs/guarantees.md).
    let fence: string | null = null;
    if (from === 'now') {
      const [drawn] = await ctx.sql<{ fence: string; in_flight: boolean }[]>`
        select pg_current_xact_id()::text as fence,
               exists (select 1 from pg_snapshot_xip(${state.snap}::pg_snapshot))
               or pg_snapshot_xmax(${state.snap}::pg_snapshot) < pg_current_xact_id() as in_flight`;
      if (drawn?.in_flight) fence = drawn.fence;
    }
    const head = BigInt(state.head);
    let cursor: bigint;
    if (from === 'beginning') cursor = floor - 1n;
    else if (from === 'now') cursor = head;
    else if (typeof from === 'bigint') {
      if (from < floor - 1n) throw new BelowRetentionFloorError(from, floor);
      if (from > head) throw new BeyondHeadError(from, head);
      cursor = from;
    } else {
      throw new Error('unreachable');
    }
    // 'now' remembers what was in flight, as registration does, so those events are not skipped.
    const watchInFlight = fence !== null;
    await tx`delete from ${t.gaps} where consumer_name = ${name} and instance_id = ${instanceId}`;
    await tx`delete from ${t.turnStarts} where consumer_name = ${name} and instance_id = ${instanceId}`;
    const statusAfter = row.status === 'disabled' ? 'disabled' : 'idle';
    await tx`
      update ${t.consumers} set
        cursor = ${cursor.toString()}::bigint, status = ${statusAfter}, attempts = 0, stuck_event_id = null,
        skip_event_id = null, rearm_count = 0, last_error = null, last_error_at = null, failure_category = null, gap_count = 0, gaps_unfenced = 0, gap_min_fence = null,
        gap_watch = '{}', gaps_recheck = false, oldest_gap_at = null,
        start_snapshot = ${watchInFlight ? state.snap : null}::pg_snapshot,
        start_fence = ${fence}::xid8,
        start_upto = ${watchInFlight ? state.head : null}::bigint, start_after = null,
        updated_at = now()
      where name = ${name} and instance_id = ${instanceId}`;
    const before = BigInt(row.cursor);
    await writeAudit(tx, t, {
      actor,
      action: 'restart',
      consumerName: name,
      instanceId,
      cursorBefore: before,
      cursorAfter: cursor,
      details: {
        from: typeof from === 'bigint' ? from.toString() : from,
        reason: reason ?? null,
        statusBefore: row.status,
      },
    });
    return {
      consumer: name,
      instanceId,
      action: 'restart',
      cursorBefore: before,
      cursorAfter: cursor,
      statusBefore: row.status,
      statusAfter,
    };
  });
}

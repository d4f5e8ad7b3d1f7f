// What operator actions read and write (docs/design.md §6.2), inside the transaction that holds the
// consumer's row (lockConsumerForOperator). The decisions are in consumer-state/consumer-state.ts;
// these statements only gather their facts and carry out what they return, with the audit row.
import type { InFlightAt, LaneChangeFact, OperatorChange } from '../consumer-state/consumer-state.js';
import { TOMBSTONE_TYPE } from '../events.js';
import { ConsumerBusyError, GapHeldError, NotAGapError, sqlStateOf } from '../errors.js';
import { parseSnapshot, subtransactionXid } from '../gaps/gaps.js';
import type { Tables } from '../schema/tables.js';
import type { TransactionSql } from '../sql-types.js';
import { retentionFloor, writeAudit } from './audit.js';
import { RETENTION_LOCK_CLASS } from './consumers.js';
import { pgArray } from './pg-array.js';

/** One consumer row. */
export interface ConsumerKey {
  readonly name: string;
  readonly instanceId: string;
}

/** One consumer row, and who acts on it. */
export interface OperatorTarget extends ConsumerKey {
  readonly actor: string;
  readonly reason: string | null;
}

/**
 * Writes an operator's change on the held row, in one statement, then what goes with it (pending
 * ranges, crash records) and the audit row.
 */
export async function applyOperatorChange(
  tx: TransactionSql,
  t: Tables,
  target: OperatorTarget,
  change: OperatorChange,
): Promise<void> {
  const { name, instanceId } = target;
  const row = change.row;
  const disabled = row.disabled === 'clear' ? { until: null, reason: null } : row.disabled;
  const start = row.start;
  if (Object.keys(row).length > 0) {
    await tx`
      update ${t.consumers} c set
        status = coalesce(${row.status ?? null}::text, c.status),
        cursor = coalesce(${row.cursor?.toString() ?? null}::bigint, c.cursor),
        attempts = case when ${row.resetAttempts === true} then 0 else c.attempts end,
        stuck_event_id = case when ${row.clearStuck === true} then null else c.stuck_event_id end,
        rearm_count = case when ${row.resetRearms === true} then 0 else c.rearm_count end,
        skip_event_id = case when ${row.skipEventId !== undefined}
                             then ${row.skipEventId?.toString() ?? null}::bigint else c.skip_event_id end,
        last_error = case when ${row.clearError === true} then null else c.last_error end,
        last_error_at = case when ${row.clearError === true} then null else c.last_error_at end,
        failure_category = case when ${row.clearError === true} then null else c.failure_category end,
        gap_count = case when ${row.clearGaps === true} then 0 else c.gap_count end,
        gaps_unfenced = case when ${row.clearGaps === true} then 0 else c.gaps_unfenced end,
        gap_min_fence = case when ${row.clearGaps === true} then null else c.gap_min_fence end,
        gap_watch = case when ${row.clearGaps === true} then '{}' else c.gap_watch end,
        gaps_recheck = case when ${row.clearGaps === true} then false else c.gaps_recheck end,
        oldest_gap_at = case when ${row.clearGaps === true} then null else c.oldest_gap_at end,
        disabled_until = case when ${disabled !== undefined}
                              then ${disabled?.until ?? null}::timestamptz else c.disabled_until end,
        disabled_reason = case when ${disabled !== undefined}
                               then ${disabled?.reason ?? null}::text else c.disabled_reason end,
        start_snapshot = case when ${start !== undefined}
                              then ${start?.snapshot ?? null}::pg_snapshot else c.start_snapshot end,
        start_fence = case when ${start !== undefined} then ${start?.fence.toString() ?? null}::xid8 else c.start_fence end,
        start_upto = case when ${start !== undefined} then ${start?.upto.toString() ?? null}::bigint else c.start_upto end,
        start_after = case when ${start !== undefined} then null else c.start_after end,
        updated_at = now()
      where c.name = ${name} and c.instance_id = ${instanceId}`;
  }
  if (row.clearGaps === true) {
    await tx`delete from ${t.gaps} where consumer_name = ${name} and instance_id = ${instanceId}`;
  }
  if (row.clearTurnStarts === true) {
    await tx`delete from ${t.turnStarts} where consumer_name = ${name} and instance_id = ${instanceId}`;
  }
  await writeAudit(tx, t, {
    actor: target.actor,
    action: change.action,
    consumerName: name,
    instanceId,
    cursorBefore: change.cursorBefore,
    cursorAfter: change.cursorAfter,
    details: { ...change.details, reason: target.reason },
  });
}

/** What a restart decides on: the retention floor, the log head and, for 'now', what is in flight. */
export interface RestartFacts {
  readonly floor: bigint;
  readonly head: bigint;
  /** The lowest id of the events kept (null: none). */
  readonly oldestKept: bigint | null;
  readonly inFlight: InFlightAt | null;
  /** A change of the consumer's lane count under way (docs/design.md §11.3), for a shared row. */
  readonly laneChange?: LaneChangeFact | null;
}

/**
 * Reads a restart's facts under the shared retention lock (no prune deletes what the new cursor
 * needs meanwhile), and the change of lanes under way, if any. With `fenceInFlight`, the events in flight at this transaction's snapshot are
 * fenced by an xid allocated after that snapshot (docs/design.md §5.4). The transaction's own xid
 * is not one: its row lock drew it before the snapshot, and a writer that began in between has a
 * higher one. So a subtransaction draws one: a savepoint whose rewrite of the held row is given an
 * xid of its own at that moment. It is drawn on this connection: an autocommit statement on the
 * pool would wait for a free connection while this one holds the row, for ever once every
 * connection of the pool is held that way.
 */
export async function readRestartFacts(
  tx: TransactionSql,
  t: Tables,
  schema: string,
  target: ConsumerKey,
  fenceInFlight: boolean,
  lockTimeoutMs: number,
): Promise<RestartFacts> {
  const inFlight = fenceInFlight ? target : null;
  // Waited for under the action's lock_timeout (`lockTimeoutMs`), as its row was: a prune holds it
  // meanwhile. Said as what it is, not as a turn holding the row.
  await tx`select pg_advisory_xact_lock_shared(${RETENTION_LOCK_CLASS}, hashtext(${schema}))`.catch(
    (error: unknown) => {
      if (sqlStateOf(error) !== '55P03') throw error;
      throw new ConsumerBusyError(target.name, lockTimeoutMs, 'prune');
    },
  );
  const floor = await retentionFloor(tx, t);
  // Once every event is pruned, the head is where the floor is.
  const [state] = await tx<{ head: string; oldest: string | null; snap: string }[]>`
    select greatest(coalesce((select max(id) from ${t.events}), 0), ${(floor - 1n).toString()}::bigint)::text as head,
           (select min(id) from ${t.events})::text as oldest,
           pg_current_snapshot()::text as snap`;
  if (!state) throw new Error('the restart read returned no row');
  let fenced: InFlightAt | null = null;
  if (inFlight) {
    const fence = await drawSubtransactionXid(tx, t, inFlight);
    const snapshot = parseSnapshot(state.snap);
    if (snapshot.xip.length > 0 || snapshot.xmax < fence)
      fenced = { snapshot: state.snap, fence, upto: BigInt(state.head) };
  }
  // Read once the row is held: a switch or the end of a change is made by a turn holding its lane.
  const [change] = target.instanceId.startsWith('*')
    ? await tx<{ from_lanes: number; to_lanes: number; barrier: string; switched: boolean }[]>`
        select from_lanes, to_lanes, barrier::text as barrier, switched_at is not null as switched
        from ${t.laneChanges} where consumer_name = ${target.name}`
    : [];
  const laneChange = change
    ? {
        consumer: target.name,
        from: change.from_lanes,
        to: change.to_lanes,
        barrier: BigInt(change.barrier),
        switched: change.switched,
      }
    : null;
  return {
    floor,
    head: BigInt(state.head),
    oldestKept: state.oldest === null ? null : BigInt(state.oldest),
    inFlight: fenced,
    laneChange,
  };
}

/**
 * An xid allocated now, in this transaction: a savepoint rewrites the held consumer row (changing
 * nothing), which assigns the subtransaction its xid, and reads it back as the new version's xmin.
 */
async function drawSubtransactionXid(tx: TransactionSql, t: Tables, target: ConsumerKey): Promise<bigint> {
  const [drawn] = await tx.savepoint(
    (sp) => sp<{ sub: string; top: string }[]>`
      update ${t.consumers} c set updated_at = c.updated_at
      where c.name = ${target.name} and c.instance_id = ${target.instanceId}
      returning c.xmin::text as sub, pg_current_xact_id()::text as top`,
  );
  if (!drawn) throw new Error(`the held consumer row ${target.name}/${target.instanceId} was not found`);
  return subtransactionXid(BigInt(drawn.sub), BigInt(drawn.top));
}

/**
 * When a disable for `forMs` (from the database's now) or until `until` ends, and whether that is
 * in the database's future.
 */
export async function readDisableEnd(
  tx: TransactionSql,
  end: { readonly forMs?: number | undefined; readonly until?: Date | undefined },
): Promise<{ until: Date | null; future: boolean }> {
  const [clock] = await tx<{ until: Date | null; future: boolean }[]>`
    select case when ${end.forMs ?? null}::float8 is not null
                then statement_timestamp() + make_interval(secs => ${end.forMs ?? null}::float8 / 1000)
                else ${end.until ?? null}::timestamptz end as until,
           coalesce(${end.until ?? null}::timestamptz > statement_timestamp(), true) as future`;
  return clock ?? { until: null, future: false };
}

/** Copies the event an operator skips into the dead letters; false when no such event exists. */
export async function copySkippedEvent(
  tx: TransactionSql,
  t: Tables,
  target: OperatorTarget,
  eventId: bigint,
  failure: { readonly lastError: string | null; readonly attempts: number },
): Promise<boolean> {
  const copied = await tx`
    insert into ${t.deadLetters} (consumer_name, instance_id, event_id, stream_id, type, data, metadata,
                                  event_created_at, reason, error, attempts)
    select ${target.name}, ${target.instanceId}, e.id, e.stream_id, e.type, e.data, e.metadata, e.created_at,
           'operator-skip', ${failure.lastError}, ${failure.attempts}
    from ${t.events} e where e.id = ${eventId.toString()}::bigint
    on conflict (consumer_name, instance_id, event_id) do update set
      reason = excluded.reason, error = excluded.error, attempts = excluded.attempts, created_at = now(),
      replay_requested_at = null, replayed_at = null`;
  return copied.count > 0;
}

/** Whether one of the consumer's pending gap ranges holds `eventId`. */
export async function isPendingGap(
  tx: TransactionSql,
  t: Tables,
  target: OperatorTarget,
  eventId: bigint,
): Promise<boolean> {
  const [range] = await tx`
    select 1 from ${t.gaps} g
    where g.consumer_name = ${target.name} and g.instance_id = ${target.instanceId}
      and g.from_id <= ${eventId.toString()}::bigint and g.to_id >= ${eventId.toString()}::bigint`;
  return range !== undefined;
}

/**
 * Inserts the tombstone of a fenced id (in a savepoint: the operator's transaction stays usable if
 * it fails), so a late writer of it fails on the primary key, and asks every consumer waiting on
 * the id to look again: the tombstone's writer is newer than every fence, so an idle pre-check
 * (which watches only older writers) would not notice it.
 * @throws {NotAGapError} when the id has committed meanwhile @throws {GapHeldError} when a transaction still owns it
 */
export async function insertTombstone(
  tx: TransactionSql,
  t: Tables,
  target: OperatorTarget,
  eventId: bigint,
): Promise<void> {
  const data = JSON.stringify({ fencedBy: target.actor, consumer: target.name, reason: target.reason });
  try {
    await tx.savepoint(
      (sp) => sp`
        insert into ${t.events} (id, stream_id, type, data, metadata) overriding system value
        values (${eventId.toString()}::bigint, '$sluice', ${TOMBSTONE_TYPE}, ${data}::text::jsonb, '{}'::jsonb)`,
    );
  } catch (error) {
    const state = sqlStateOf(error);
    if (state === '23505')
      throw new NotAGapError(
        target.name,
        eventId,
        'the event has committed meanwhile; the next turn delivers it',
      );
    if (state === '55P03') throw new GapHeldError(eventId);
    throw error;
  }
  // Every consumer with a pending gap there waits its turn for the row: another's turn (or an
  // action on it, another fence among them: two fences of one shared id each hold their own row
  // first, and PostgreSQL ends one of them as a deadlock) is a busy consumer, not an action's failure.
  try {
    await tx`
      update ${t.consumers} c set gaps_recheck = true, updated_at = now()
      where exists (select 1 from ${t.gaps} g
                    where g.consumer_name = c.name and g.instance_id = c.instance_id
                      and ${eventId.toString()}::bigint between g.from_id and g.to_id)`;
  } catch (error) {
    const state = sqlStateOf(error);
    if (state === '55P03' || state === '40P01')
      throw new ConsumerBusyError(target.name, 0, { sharedGap: eventId });
    throw error;
  }
}

/**
 * The consumer's dead letters a replay takes, oldest first: `ids` (also ones replayed before), or
 * those neither replayed nor asked for yet.
 */
export async function selectReplays(
  tx: TransactionSql,
  t: Tables,
  target: OperatorTarget,
  wanted: { readonly ids: readonly bigint[] | undefined; readonly limit: number },
): Promise<bigint[]> {
  const rows = await tx<{ id: string }[]>`
    select d.id::text from ${t.deadLetters} d
    where d.consumer_name = ${target.name} and d.instance_id = ${target.instanceId}
      and (case when ${wanted.ids === undefined}
                then d.replayed_at is null and d.replay_requested_at is null
                else d.id = any(${pgArray(wanted.ids ?? [])}::int8[]) end)
    order by d.id limit ${wanted.limit}`;
  return rows.map((r) => BigInt(r.id));
}

/** Those of `ids` that are not dead letters of the consumer's rows named (any state). */
export async function missingDeadLetters(
  tx: TransactionSql,
  t: Tables,
  name: string,
  instanceIds: readonly string[],
  ids: readonly bigint[],
): Promise<bigint[]> {
  const rows = await tx<{ id: string }[]>`
    select w.id::text from unnest(${pgArray(ids)}::int8[]) as w(id)
    where not exists (
      select 1 from ${t.deadLetters} d
      where d.id = w.id and d.consumer_name = ${name} and d.instance_id = any(${pgArray(instanceIds)}::text[]))
    order by w.id`;
  return rows.map((r) => BigInt(r.id));
}

/** Asks the consumer's next turn to deliver these dead letters again. */
export async function requestReplays(tx: TransactionSql, t: Tables, ids: readonly bigint[]): Promise<void> {
  await tx`
    update ${t.deadLetters} set replay_requested_at = now(), replayed_at = null
    where id = any(${pgArray(ids)}::int8[])`;
}

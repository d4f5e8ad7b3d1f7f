// A change of a consumer's lane count (docs/design.md §11.3): asked for, driven to its barrier by the
// old lanes' turns, switched to the new lanes, and the old lanes retired.
import { takeAdvisoryLocks } from './advisory-locks.js';
import { guardedBegin } from '../connections/guarded-transaction.js';
import { ConsumerNotFoundError, InvalidOptionError, LaneChangeInProgressError } from '../errors.js';
import { laneInstanceIds, MAX_LANES, parseLaneInstanceId, type LaneKey } from '../lanes/lanes.js';
import type { Tables } from '../schema/tables.js';
import type { Sql, TransactionSql } from '../sql-types.js';
import { writeAudit } from './audit.js';
import { pgArray } from './pg-array.js';

// Second key: hashtext(schema). Taken (exclusively) by registration and by a request to change a
// consumer's lanes, so that no two of them create two lane sets of one consumer at once.
export const LANES_LOCK_CLASS = 0x534c4c4e; // 'SLLN'

/**
 * How long an old lane's turn waits for the turns of the old lanes after it to end, to switch a
 * change of lanes (see trySwitchLanes): below PostgreSQL's default deadlock_timeout (1 s).
 */
export const SWITCH_WAIT_MS = 500;

/** The lane counts a consumer's shared rows have: one, or two while a switched change drains. */
export function laneCountsOf(instanceIds: readonly string[]): number[] {
  const counts = new Set<number>();
  for (const id of instanceIds) {
    const lane = parseLaneInstanceId(id);
    if (lane) counts.add(lane.count);
  }
  return [...counts].sort((a, b) => a - b);
}

/** What a request to change a consumer's lanes did. */
export interface LaneChangeRequest {
  readonly consumer: string;
  /** The lane count its rows had. */
  readonly from: number;
  readonly to: number;
  /** 'started', 'retargeted' (a change not switched yet now goes to `to`), 'cancelled', or 'unchanged'. */
  readonly outcome: 'started' | 'retargeted' | 'cancelled' | 'unchanged';
  readonly barrier: bigint | null;
}

/**
 * Asks for `name`'s shared rows to become `to` lanes. The old lanes deliver up to a barrier (the
 * highest cursor among them now), the new lanes are created there once every old lane has reached
 * it, and the old ones go once their pending gaps are resolved (see the turn's lane step).
 * Audited. A change that has not switched yet is retargeted (or cancelled when `to` is the count the
 * rows have).
 * @throws {LaneChangeInProgressError} while a switched change still drains its old lanes
 * @throws {ConsumerNotFoundError} @throws {InvalidOptionError} when the consumer has no shared rows
 */
export async function requestLaneChange(
  sql: Sql,
  t: Tables,
  schema: string,
  name: string,
  to: number,
  actor: string,
): Promise<LaneChangeRequest> {
  if (!Number.isSafeInteger(to) || to < 1 || to > MAX_LANES) {
    throw new InvalidOptionError('lanes', `must be an integer from 1 to ${MAX_LANES}`);
  }
  return guardedBegin(sql, async (tx) => {
    await takeAdvisoryLocks(
      tx,
      () => tx`select pg_advisory_xact_lock(${LANES_LOCK_CLASS}, hashtext(${schema}))`,
    );
    const rows = await tx<{ instance_id: string; cursor: string }[]>`
      select instance_id, cursor::text as cursor from ${t.consumers}
      where name = ${name} and left(instance_id, 1) = '*'`;
    const [pending] = await tx<
      { from_lanes: number; to_lanes: number; barrier: string; switched: boolean }[]
    >`
      select from_lanes, to_lanes, barrier::text as barrier, switched_at is not null as switched
      from ${t.laneChanges} where consumer_name = ${name} for update`;
    const counts = laneCountsOf(rows.map((r) => r.instance_id));
    if (rows.length === 0) {
      const [perInstance] = await tx`select 1 from ${t.consumers} where name = ${name} limit 1`;
      if (!perInstance) throw new ConsumerNotFoundError(name);
    }
    if (rows.length === 0 || counts.length === 0) {
      throw new InvalidOptionError(
        'name',
        `consumer "${name}" has per-instance rows: only a shared consumer runs as lanes`,
      );
    }
    const audit = (outcome: LaneChangeRequest['outcome'], from: number, barrier: bigint | null) =>
      writeAudit(tx, t, {
        actor,
        action: 'relane',
        consumerName: name,
        instanceId: '*',
        cursorBefore: null,
        cursorAfter: barrier,
        details: { from, to, outcome },
      });
    if (pending) {
      if (pending.switched) throw new LaneChangeInProgressError(name, pending.from_lanes, pending.to_lanes);
      const barrier = BigInt(pending.barrier);
      if (pending.to_lanes === to) {
        return { consumer: name, from: pending.from_lanes, to, outcome: 'unchanged', barrier };
      }
      if (pending.from_lanes === to) {
        await tx`delete from ${t.laneChanges} where consumer_name = ${name}`;
        await audit('cancelled', pending.from_lanes, null);
        return { consumer: name, from: pending.from_lanes, to, outcome: 'cancelled', barrier: null };
      }
      await tx`update ${t.laneChanges} set to_lanes = ${to} where consumer_name = ${name}`;
      await audit('retargeted', pending.from_lanes, barrier);
      return { consumer: name, from: pending.from_lanes, to, outcome: 'retargeted', barrier };
    }
    const from = counts[0] as number;
    if (counts.length > 1) throw new LaneChangeInProgressError(name, from, counts[1] as number);
    if (from === to) return { consumer: name, from, to, outcome: 'unchanged', barrier: null };
    const barrier = rows.map((r) => BigInt(r.cursor)).reduce((a, b) => (a > b ? a : b), 0n);
    await tx`
      insert into ${t.laneChanges} (consumer_name, from_lanes, to_lanes, barrier, requested_by)
      values (${name}, ${from}, ${to}, ${barrier.toString()}::bigint, ${actor})`;
    await audit('started', from, barrier);
    return { consumer: name, from, to, outcome: 'started', barrier };
  });
}

/**
 * An old lane found its cursor above the barrier (its turn was under way when the change was asked
 * for, and read nothing of it): the barrier rises to it, so that the new lanes start where every old
 * lane has delivered up to, and deliver nothing twice.
 */
export async function raiseBarrier(
  tx: TransactionSql,
  t: Tables,
  name: string,
  cursor: bigint,
): Promise<void> {
  await tx`
    update ${t.laneChanges} set barrier = greatest(barrier, ${cursor.toString()}::bigint)
    where consumer_name = ${name} and switched_at is null`;
}

/**
 * How many of an old lane's pending ranges start at or below the barrier: the ones it still owes
 * (docs/design.md §11.3). A strict lane waiting at a hole holds ranges above its cursor, which is
 * the barrier: the ids there are the new lanes' to deliver.
 */
export async function rangesUpToBarrier(
  tx: TransactionSql,
  t: Tables,
  name: string,
  instanceId: string,
  barrier: bigint,
): Promise<number> {
  const [row] = await tx<{ n: number }[]>`
    select count(*)::int as n from ${t.gaps}
    where consumer_name = ${name} and instance_id = ${instanceId} and from_id <= ${barrier.toString()}::bigint`;
  return row?.n ?? 0;
}

/**
 * Tries to switch a change of lanes over, from an old lane's turn that holds its row at the
 * barrier: every other old lane must be held here too, at the barrier, and healthy (not dead or
 * disabled, no failed attempt; for strict ordering, no pending range at or below the barrier
 * either). Then the new lanes are
 * created at the barrier, in this transaction. Returns whether it switched.
 *
 * The other old lanes' turns run at the same time as this one (one pass turns them all, on every
 * instance). Had each turn locked the others without waiting, two turns holding their own rows
 * would each find the other's held and give up, pass after pass. So the old lanes after this one
 * (in instance id order) are waited for, and those before it are not (`SKIP LOCKED`): among turns
 * that overlap, the first waits for the others to end, and they give up on it. A turn waits only
 * when the others, as last committed, stand at the barrier and healthy (their turns are short),
 * and at most {@link SWITCH_WAIT_MS}, in a savepoint: a wait that runs out gives the attempt up
 * and the turn goes on. Below PostgreSQL's default deadlock_timeout, it also ends a wait that
 * closes a cycle with another transaction (an operator's, or a handler's write through ctx.tx)
 * before the other one is failed as a deadlock.
 */
export async function trySwitchLanes(
  tx: TransactionSql,
  t: Tables,
  name: string,
  self: string,
  change: { readonly from: number; readonly to: number; readonly barrier: bigint },
  options: { readonly strict: boolean; readonly systemIdentifier: string | null },
): Promise<boolean> {
  const others = pgArray(laneInstanceIds(change.from).filter((id) => id !== self));
  const expected = change.from - 1;
  // The other old lanes: how many there are, how many stand at the barrier healthy, how many come
  // before this one; read before any is locked, and again once all are held.
  const othersNow = async () => {
    const [now] = await tx<{ n: number; ready: number; before: number; lock_timeout: string }[]>`
      select count(*)::int as n,
             count(*) filter (where cursor = ${change.barrier.toString()}::bigint
                                and status in ('idle', 'processing') and attempts = 0
                                and skip_event_id is null and start_upto is null
                                and (not ${options.strict} or not exists (
                                  select 1 from ${t.gaps} g
                                  where g.consumer_name = c.name and g.instance_id = c.instance_id
                                    and g.from_id <= ${change.barrier.toString()}::bigint)))::int as ready,
             count(*) filter (where instance_id < ${self})::int as before,
             current_setting('lock_timeout') as lock_timeout
      from ${t.consumers} c where name = ${name} and instance_id = any(${others}::text[])`;
    return now !== undefined && now.n === expected && now.ready === expected ? now : undefined;
  };
  const looks = await othersNow();
  if (!looks) return false;
  if (looks.before > 0) {
    const [before] = await tx<{ n: number }[]>`
      select count(*)::int as n from (
        select instance_id from ${t.consumers}
        where name = ${name} and instance_id = any(${others}::text[]) and instance_id < ${self}
        order by instance_id
        for update skip locked) b`;
    if (before?.n !== looks.before) return false;
  }
  const after = { name, self, others, lockTimeout: looks.lock_timeout };
  if (looks.n > looks.before && !(await waitForLanesAfter(tx, t, after))) return false;
  // Read once they are held (docs/design.md §5.4): a lock that followed a commit sees it only so.
  if (!(await othersNow())) return false;
  const switched = await tx`
    update ${t.laneChanges} set switched_at = now()
    where consumer_name = ${name} and switched_at is null and barrier = ${change.barrier.toString()}::bigint
      and from_lanes = ${change.from} and to_lanes = ${change.to}`;
  if (switched.count === 0) return false;
  await tx`
    insert into ${t.consumers} as c (name, instance_id, cursor, system_identifier, last_progress_at, version, lane_key)
    select ${name}, id, ${change.barrier.toString()}::bigint, ${options.systemIdentifier}, now(),
           (select max(o.version) from ${t.consumers} o where o.name = ${name}),
           (select max(o.lane_key) from ${t.consumers} o where o.name = ${name} and left(o.instance_id, 1) = '*')
    from unnest(${pgArray(laneInstanceIds(change.to))}::text[]) as id
    on conflict (name, instance_id) do nothing`;
  await writeAudit(tx, t, {
    actor: 'sluice-dispatcher',
    action: 'relane-switched',
    consumerName: name,
    instanceId: '*',
    cursorBefore: change.barrier,
    cursorAfter: change.barrier,
    details: { from: change.from, to: change.to },
  });
  return true;
}

/**
 * Locks the old lanes after `self` (in instance id order), waiting at most {@link SWITCH_WAIT_MS}
 * for their turns to end, in a savepoint; false when the wait ran out. `lockTimeout`: the
 * transaction's own, set again after the wait.
 */
async function waitForLanesAfter(
  tx: TransactionSql,
  t: Tables,
  lanes: {
    readonly name: string;
    readonly self: string;
    readonly others: string;
    readonly lockTimeout: string;
  },
): Promise<boolean> {
  const { name, self, others } = lanes;
  const waited = await tx
    .savepoint(async (sp) => {
      await sp`select set_config('lock_timeout', ${`${SWITCH_WAIT_MS}ms`}, true)`;
      await sp`
        select instance_id from ${t.consumers}
        where name = ${name} and instance_id = any(${others}::text[]) and instance_id > ${self}
        order by instance_id
        for update`;
      return true;
    })
    .catch((error: unknown) => {
      // lock_not_available (the wait ran out), deadlock_detected: undone with the savepoint.
      const code = (error as { code?: unknown }).code;
      if (code === '55P03' || code === '40P01') return false;
      throw error;
    });
  // The wait's bound, kept by a savepoint released, applies to it alone.
  await tx`select set_config('lock_timeout', ${lanes.lockTimeout}, true)`;
  return waited;
}

/**
 * Removes an old lane once a switched change no longer needs it (at the barrier, no pending gap, no
 * failure): its dead letters move to the new lane of their key, and the change is over once the
 * last old lane is gone.
 */
export async function retireLane(
  tx: TransactionSql,
  t: Tables,
  name: string,
  self: string,
  change: { readonly from: number; readonly to: number; readonly barrier: bigint },
  key: LaneKey,
): Promise<void> {
  const field = key.from === 'streamId' ? '' : key.field;
  // Old lanes retiring at once take turns here, so that the last one sees the others gone (each
  // statement below reads after the lock) and ends the change. Every lane step locks its own row
  // first and the change's row second: no cycle.
  await tx`select 1 from ${t.laneChanges} where consumer_name = ${name} for update`;
  await tx`
    update ${t.deadLetters} d set instance_id = case when ${change.to} = 1 then '*'
      else '*' || abs(hashtextextended(
             case ${key.from} when 'streamId' then d.stream_id
                              when 'data' then coalesce(d.data ->> ${field}, '')
                              else coalesce(d.metadata ->> ${field}, '') end, 0) % ${change.to})::text
           || '/' || ${change.to}::text end
    where d.consumer_name = ${name} and d.instance_id = ${self}`;
  await tx`delete from ${t.turnStarts} where consumer_name = ${name} and instance_id = ${self}`;
  await tx`delete from ${t.consumers} where name = ${name} and instance_id = ${self}`;
  await tx`
    delete from ${t.laneChanges} l
    where l.consumer_name = ${name} and l.switched_at is not null
      and not exists (select 1 from ${t.consumers} c
                      where c.name = ${name} and c.instance_id = any(${pgArray(laneInstanceIds(change.from))}::text[]))`;
  await writeAudit(tx, t, {
    actor: 'sluice-dispatcher',
    action: 'lane-retired',
    consumerName: name,
    instanceId: self,
    cursorBefore: change.barrier,
    cursorAfter: null,
    details: { from: change.from, to: change.to },
  });
}

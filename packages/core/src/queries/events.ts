import { passedStub, type EventRecord, type JsonObject } from '../events.js';
import type { LaneKey } from '../lanes/lanes.js';
import type { Tables } from '../schema/tables.js';
import type { Sql, TransactionSql } from '../sql-types.js';
import { pgArray } from './pg-array.js';

/** An events row as queries select it (`id::text`, so the id never depends on the pool's type parsers). */
export interface EventRow {
  id: string;
  stream_id: string;
  type: string;
  data: JsonObject;
  metadata: JsonObject;
  created_at: Date;
}

export function eventFromRow(row: EventRow): EventRecord {
  return {
    id: BigInt(row.id),
    streamId: row.stream_id,
    type: row.type,
    data: row.data,
    metadata: row.metadata,
    createdAt: row.created_at,
  };
}

interface FetchRow {
  snapshot: string | null;
  head: string | null;
  id: string | null;
  stream_id: string | null;
  type: string | null;
  data: EventRow['data'] | null;
  metadata: EventRow['metadata'] | null;
  created_at: Date | null;
  /** A group read's lane of each event. */
  lane?: number | null;
}

/** What one fetch statement saw. */
export interface FetchedBatch {
  /** pg_current_snapshot() of the statement that read the events. */
  snapshot: string;
  /** The highest id that statement saw in the log ('0' when it is empty). */
  head: string;
  /** Ascending by id. */
  events: EventRecord[];
}

/**
 * The rows a turn's fetch reads, one set for fetchBatch and fetchFilteredBatch: up to `limit` events
 * above the cursor (and at most `above`, a lane's cap), the re-fetched gap ranges, and a 'now'
 * consumer's stragglers, read by a branch of their own (the common fetch keeps its plan and its
 * prepared statement). An id may come twice (a range and the ids above the cursor).
 */
function candidateRows(
  tx: TransactionSql | Sql,
  t: Tables,
  cursor: bigint,
  ranges: { from: readonly bigint[]; to: readonly bigint[] },
  limit: number,
  start: StartStragglers | undefined,
  above = tx``,
) {
  const stragglers = start
    ? tx`
       union all
       (select id, stream_id, type, data, metadata, created_at from ${t.events}
        where id > ${start.after.toString()}::bigint and id <= ${start.upto.toString()}::bigint
          and tx >= pg_snapshot_xmin(${start.snapshot}::pg_snapshot)
          and not pg_visible_in_snapshot(tx, ${start.snapshot}::pg_snapshot)
        order by id limit ${limit})`
    : tx``;
  return tx`
       (select id, stream_id, type, data, metadata, created_at from ${t.events}
        where id > ${cursor.toString()}::bigint ${above} order by id limit ${limit})
       union all
       (select ev.* from unnest(${pgArray(ranges.from)}::int8[], ${pgArray(ranges.to)}::int8[]) as r(f, t)
        cross join lateral (
          select id, stream_id, type, data, metadata, created_at from ${t.events}
          where id between r.f and r.t order by id limit ${limit}) ev)
       ${stragglers}`;
}

/**
 * The turn's fetch (docs/design.md §4.3, §5.3): events above the cursor plus the visible ids inside the
 * re-fetched gap ranges, in id order, LIMIT `limit`, and the snapshot of this very statement.
 * One statement, one snapshot: the xmin that may justify a burn and the rows that prove a range
 * empty must come from the same snapshot (Marten lost events where they did not, F2).
 *
 * The snapshot and the head come as one row of their own ahead of the events, not as columns of
 * every event: sorting the joined rows again cost PostgreSQL about 50 % more CPU per event than
 * the events alone (bench: catch-up). The id order is checked here, not left to the plan.
 */
export async function fetchBatch(
  tx: TransactionSql | Sql,
  t: Tables,
  cursor: bigint,
  ranges: { from: readonly bigint[]; to: readonly bigint[] },
  limit: number,
  start?: StartStragglers,
  group?: LaneGroup,
): Promise<FetchedBatch & { lanes?: Int16Array }> {
  const rows = await tx<FetchRow[]>`
    (select pg_current_snapshot()::text as snapshot,
            (select coalesce(max(id), 0) from ${t.events})::text as head,
            null::text as id, null::text as stream_id, null::text as type,
            null::jsonb as data, null::jsonb as metadata, null::timestamptz as created_at
            ${group ? tx`, null::int2 as lane` : tx``})
    union all
    (select null, null, u.id::text, u.stream_id, u.type, u.data, u.metadata, u.created_at
            ${group ? tx`, abs(hashtextextended(${laneKeyOf(tx, group.key)}, 0) % ${group.count})::int2` : tx``}
     from (${candidateRows(tx, t, cursor, ranges, limit, start)}) u
     order by u.id limit ${limit})`;
  let header: FetchRow | undefined;
  const events: EventRecord[] = [];
  const laneOf = new Map<EventRecord, number>();
  let ascending = true;
  for (const row of rows) {
    if (row.id === null) {
      header = row;
      continue;
    }
    const event = eventFromRow(row as EventRow);
    const previous = events[events.length - 1];
    if (previous && previous.id >= event.id) ascending = false;
    if (group) laneOf.set(event, row.lane ?? 0);
    events.push(event);
  }
  if (!header || header.snapshot === null || header.head === null) {
    throw new Error('the fetch returned no snapshot row');
  }
  if (!ascending) events.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  if (!group) return { snapshot: header.snapshot, head: header.head, events };
  const lanes = Int16Array.from(events, (event) => laneOf.get(event) ?? 0);
  return { snapshot: header.snapshot, head: header.head, events, lanes };
}

/** A group read's lanes (docs/design.md §11.2): each event comes with its lane of `count`. */
export interface LaneGroup {
  readonly key: LaneKey;
  readonly count: number;
}

/** An event's key as SQL over the row `u` (the fetches' alias): its stream id or a top-level field. */
function laneKeyOf(tx: TransactionSql | Sql, key: LaneKey) {
  // One shape per kind of key (no CASE evaluated on every row).
  if (key.from === 'streamId') return tx`u.stream_id`;
  return key.from === 'data'
    ? tx`coalesce(u.data ->> ${key.field}, '')`
    : tx`coalesce(u.metadata ->> ${key.field}, '')`;
}

/**
 * For a 'now' consumer (startFrom): the events it has still to receive at or below the head it
 * registered at, `upto`. They are the ones `snapshot` (its registration's) did not see: their
 * transactions were in flight then. Read only once every such transaction has ended (xmin past the
 * registration's fence), `after` those already delivered.
 */
export interface StartStragglers {
  readonly after: bigint;
  readonly upto: bigint;
  readonly snapshot: string;
}

/**
 * What a filtered fetch keeps for the consumer: the events of one lane (docs/design.md §11), of the
 * handled types, and with parking on, their keys and whether the key is parked.
 */
export interface FetchFilter {
  readonly consumer: string;
  readonly laneIndex: number;
  readonly laneCount: number;
  readonly key: LaneKey;
  /** null: every type. */
  readonly types: readonly string[] | null;
  /** Read each kept event's key and whether it is parked (errorPolicy.parkKey). */
  readonly parking: boolean;
  /** A lane draining to a change of lanes reads nothing above this id. */
  readonly cap: bigint | null;
  /** At most this many kept events: the statement stops right before the next one. */
  readonly keptLimit: number;
}

/** What a filtered fetch saw: FetchedBatch, with the events it does not keep as stubs. */
export interface FilteredBatch extends FetchedBatch {
  /** The kept events' keys (parking only). */
  readonly keys: ReadonlyMap<bigint, string>;
  /** Kept events whose key was parked when the statement ran. */
  readonly parked: ReadonlySet<bigint>;
  /** The statement stopped at keptLimit kept events: ids after the last row were not examined. */
  readonly cut: boolean;
}

interface FilteredRow extends FetchRow {
  kept: boolean | null;
  key: string | null;
  parked: boolean | null;
  /** Kept events among the rows the statement read (its LIMIT): more than keptLimit means it cut. */
  kept_total: string | null;
  /** A run of passed events: every id from `id` to this one is visible and not kept. */
  run_to: string | null;
}

/**
 * The turn's fetch for a filtered consumer (a lane, a type filter, parked keys): the same rows,
 * LIMIT and snapshot as fetchBatch, so the gap logic sees every visible id, but only the events
 * the consumer keeps come back whole. The others come back as runs of consecutive ids (from, to),
 * one row per run, and are passed (PASSED_TYPE stubs), resolved without a handler: a lane of 32
 * receives about one row per kept event, not 32. An event's lane is
 * abs(hashtextextended(key, 0) % lanes): the hash PostgreSQL's hash partitioning relies on, stable
 * across releases and platforms. One statement, one snapshot, as fetchBatch.
 */
export async function fetchFilteredBatch(
  tx: TransactionSql | Sql,
  t: Tables,
  cursor: bigint,
  ranges: { from: readonly bigint[]; to: readonly bigint[] },
  limit: number,
  filter: FetchFilter,
  start?: StartStragglers,
): Promise<FilteredBatch> {
  const above = filter.cap === null ? tx`` : tx`and id <= ${filter.cap.toString()}::bigint`;
  const types = filter.types === null ? null : pgArray(filter.types);
  const rows = await tx<FilteredRow[]>`
    with w as materialized (
      select v.*,
             -- Constant along consecutive ids that are all passed: one run. dense_rank, not
             -- row_number: an id read twice (a re-fetched range and the ids above the cursor)
             -- must not make two stretches on either side of a hole look like one.
             v.id - dense_rank() over (partition by v.kept order by v.id) as run
      from (
        select u.*, k.kept, k.key,
               count(*) filter (where k.kept) over (order by u.id rows unbounded preceding) as nth,
               count(*) filter (where k.kept) over () as kept_total
        from (${candidateRows(tx, t, cursor, ranges, limit, start, above)}) u
        cross join lateral (select ${laneKeyOf(tx, filter.key)} as key) k0
        cross join lateral (
          select k0.key,
                 abs(hashtextextended(k0.key, 0) % ${filter.laneCount}) = ${filter.laneIndex}
                 and (${types}::text[] is null or u.type = any(${types}::text[])) as kept
        ) k
        order by u.id limit ${limit}
      ) v
      -- Up to the kept limit: every row before the (keptLimit + 1)-th kept event.
      where v.nth <= ${filter.keptLimit}
    )
    (select pg_current_snapshot()::text as snapshot,
            (select coalesce(max(id), 0) from ${t.events})::text as head,
            null::text as id, null::text as run_to, null::boolean as kept, null::text as key,
            null::boolean as parked, null::text as kept_total, null::text as stream_id,
            null::text as type, null::jsonb as data, null::jsonb as metadata,
            null::timestamptz as created_at)
    union all
    (select null, null, w.id::text, null, true, w.key,
            ${filter.parking} and exists (
              select 1 from ${t.parkedKeys} p where p.consumer_name = ${filter.consumer} and p.key = w.key),
            w.kept_total::text, w.stream_id, w.type, w.data, w.metadata, w.created_at
     from w where w.kept order by w.id)
    union all
    (select null, null, min(w.id)::text, max(w.id)::text, false, null, null, max(w.kept_total)::text,
            null, null, null, null, null
     from w where not w.kept group by w.run order by min(w.id))`;
  let header: FilteredRow | undefined;
  const kept: EventRecord[] = [];
  const runs: { from: bigint; to: bigint }[] = [];
  const keys = new Map<bigint, string>();
  const parked = new Set<bigint>();
  let cut = false;
  for (const row of rows) {
    if (row.id === null) {
      header = row;
      continue;
    }
    if (row.kept_total !== null && Number(row.kept_total) > filter.keptLimit) cut = true;
    if (row.kept !== true) {
      runs.push({ from: BigInt(row.id), to: BigInt(row.run_to ?? row.id) });
      continue;
    }
    const event = eventFromRow(row as EventRow);
    if (filter.parking && row.key !== null) keys.set(event.id, row.key);
    if (row.parked === true) parked.add(event.id);
    kept.push(event);
  }
  if (!header || header.snapshot === null || header.head === null) {
    throw new Error('the fetch returned no snapshot row');
  }
  return { snapshot: header.snapshot, head: header.head, events: mergeRuns(kept, runs), keys, parked, cut };
}

/** The kept events and a stub for every id of the passed runs, in id order. */
function mergeRuns(kept: EventRecord[], runs: { from: bigint; to: bigint }[]): EventRecord[] {
  // Each part comes ordered by the statement; checked here, not left to the plan.
  if (!isAscending(kept.map((e) => e.id))) kept.sort((a, b) => compareIds(a.id, b.id));
  if (!isAscending(runs.map((r) => r.from))) runs.sort((a, b) => compareIds(a.from, b.from));
  const events: EventRecord[] = [];
  let k = 0;
  for (const run of runs) {
    while (k < kept.length && (kept[k] as EventRecord).id < run.from) events.push(kept[k++] as EventRecord);
    for (let id = run.from; id <= run.to; id++) events.push(passedStub(id));
  }
  while (k < kept.length) events.push(kept[k++] as EventRecord);
  return events;
}

function compareIds(a: bigint, b: bigint): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function isAscending(ids: readonly bigint[]): boolean {
  for (let i = 1; i < ids.length; i++) if ((ids[i - 1] as bigint) > (ids[i] as bigint)) return false;
  return true;
}

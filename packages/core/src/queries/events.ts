import { eventFromRow, type EventRecord, type EventRow } from '../events.js';
import type { Tables } from '../schema/tables.js';
import type { Sql, TransactionSql } from '../sql-types.js';
import { pgArray } from './pg-array.js';

interface FetchRow {
  snapshot: string | null;
  head: string | null;
  id: string | null;
  stream_id: string | null;
  type: string | null;
  data: EventRow['data'] | null;
  metadata: EventRow['metadata'] | null;
  created_at: Date | null;
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
 * The turn's fetch (DESIGN §4.3, §5): events above the cursor plus the visible ids inside the
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
): Promise<FetchedBatch> {
  const rows = await tx<FetchRow[]>`
    (select pg_current_snapshot()::text as snapshot,
            (select coalesce(max(id), 0) from ${t.events})::text as head,
            null::text as id, null::text as stream_id, null::text as type,
            null::jsonb as data, null::jsonb as metadata, null::timestamptz as created_at)
    union all
    (select null, null, u.id::text, u.stream_id, u.type, u.data, u.metadata, u.created_at
     from (
       (select id, stream_id, type, data, metadata, created_at from ${t.events}
        where id > ${cursor.toString()}::bigint order by id limit ${limit})
       union all
       (select ev.* from unnest(${pgArray(ranges.from)}::int8[], ${pgArray(ranges.to)}::int8[]) as r(f, t)
        cross join lateral (
          select id, stream_id, type, data, metadata, created_at from ${t.events}
          where id between r.f and r.t order by id limit ${limit}) ev)
     ) u
     order by u.id limit ${limit})`;
  let header: FetchRow | undefined;
  const events: EventRecord[] = [];
  let ascending = true;
  for (const row of rows) {
    if (row.id === null) {
      header = row;
      continue;
    }
    const event = eventFromRow(row as EventRow);
    const previous = events[events.length - 1];
    if (previous && previous.id >= event.id) ascending = false;
    events.push(event);
  }
  if (!header || header.snapshot === null || header.head === null) {
    throw new Error('the fetch returned no snapshot row');
  }
  if (!ascending) events.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  return { snapshot: header.snapshot, head: header.head, events };
}

/**
 * For a 'now' consumer: the events up to `upto` that were still in flight when it registered
 * (invisible in its registration snapshot), once every transaction of that moment has ended.
 * Runs once per consumer registration; it scans the log up to `upto`.
 */
export function fetchStartStragglers(
  tx: TransactionSql,
  t: Tables,
  startSnapshot: string,
  after: bigint,
  upto: bigint,
  limit: number,
) {
  return tx<EventRow[]>`
    select e.id::text as id, e.stream_id, e.type, e.data, e.metadata, e.created_at from ${t.events} e
    where e.id > ${after.toString()}::bigint and e.id <= ${upto.toString()}::bigint
      and e.tx >= pg_snapshot_xmin(${startSnapshot}::pg_snapshot)
      and not pg_visible_in_snapshot(e.tx, ${startSnapshot}::pg_snapshot)
    order by e.id limit ${limit}`; // e.id: the bigint, not the text output column of the same name
}

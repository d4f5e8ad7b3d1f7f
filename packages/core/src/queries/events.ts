import type { EventRow } from '../events.js';
import type { Tables } from '../schema/tables.js';
import type { Sql, TransactionSql } from '../sql-types.js';
import { pgArray } from './pg-array.js';

export interface FetchRow extends Partial<EventRow> {
  snapshot: string;
  head: string;
}

/**
 * The turn's fetch (DESIGN §4.3, §5): events above the cursor plus the visible ids inside the
 * re-fetched gap ranges, in id order, LIMIT `limit`, and the snapshot of this very statement.
 * One statement, one snapshot: the xmin that may justify a burn and the rows that prove a range
 * empty must come from the same snapshot (Marten lost events where they did not, F2).
 * Returns at least one row; event columns are null when nothing was found.
 */
export function fetchBatch(
  tx: TransactionSql | Sql,
  t: Tables,
  cursor: bigint,
  ranges: { from: readonly bigint[]; to: readonly bigint[] },
  limit: number,
) {
  return tx<FetchRow[]>`
    select s.snap::text as snapshot, h.head::text as head,
           e.id::text as id, e.stream_id, e.type, e.data, e.metadata, e.created_at
    from (select pg_current_snapshot() as snap) s
    cross join (select coalesce(max(id), 0) as head from ${t.events}) h
    left join lateral (
      select * from (
        (select id, stream_id, type, data, metadata, created_at from ${t.events}
         where id > ${cursor.toString()}::bigint order by id limit ${limit})
        union all
        (select ev.* from unnest(${pgArray(ranges.from)}::int8[], ${pgArray(ranges.to)}::int8[]) as r(f, t)
         cross join lateral (
           select id, stream_id, type, data, metadata, created_at from ${t.events}
           where id between r.f and r.t order by id limit ${limit}) ev)
      ) u order by u.id limit ${limit}
    ) e on true
    order by e.id`;
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

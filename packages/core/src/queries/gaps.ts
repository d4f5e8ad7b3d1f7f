import type { GapRange } from '../gaps/gaps.js';
import type { Tables } from '../schema/tables.js';
import type { Queryable, TransactionSql } from '../sql-types.js';
import { pgArray } from './pg-array.js';

export interface StoredRange extends GapRange {
  readonly observedAt: Date;
}

interface GapRow {
  from_id: string;
  to_id: string;
  fence: string | null;
  observed_at: Date;
}

/**
 * The ranges this turn must re-fetch (see the gap watch in gaps/gaps.ts): unfenced ones, burnable ones (fence
 * below xmin), and those fenced above the lowest watched xid that has ended. `all` when the
 * previous turn left a range visible-but-undelivered or unexamined.
 */
export async function selectRangesToRecheck(
  tx: Queryable,
  t: Tables,
  name: string,
  instanceId: string,
  filter: { all: boolean; xmin: bigint; lowestEnded: bigint | null },
  cursor: bigint,
): Promise<StoredRange[]> {
  // Ranges ahead of the cursor too: strict ordering left them, and a fast turn replaces them.
  const rows = await tx<GapRow[]>`
    select g.from_id::text, g.to_id::text, g.fence::text, g.observed_at from ${t.gaps} g
    where g.consumer_name = ${name} and g.instance_id = ${instanceId}
      and (${filter.all} or g.fence is null or g.fence < ${filter.xmin.toString()}::xid8
           or g.fence > ${filter.lowestEnded === null ? null : filter.lowestEnded.toString()}::xid8
           or g.from_id > ${cursor.toString()}::bigint)
    order by g.from_id`; // g.from_id: the bigint; the output column of that name is text
  return rows.map((row) => ({
    from: BigInt(row.from_id),
    to: BigInt(row.to_id),
    fence: row.fence === null ? null : BigInt(row.fence),
    observedAt: row.observed_at,
  }));
}

/** Replaces ranges: deletes the rows starting at `removeFroms`, inserts `add`. Returns the net row change. */
export async function replaceRanges(
  tx: TransactionSql,
  t: Tables,
  name: string,
  instanceId: string,
  removeFroms: readonly bigint[],
  add: readonly StoredRange[],
): Promise<number> {
  if (removeFroms.length > 0) {
    await tx`
      delete from ${t.gaps}
      where consumer_name = ${name} and instance_id = ${instanceId}
        and from_id = any(${pgArray(removeFroms)}::int8[])`;
  }
  if (add.length > 0) {
    await tx`
      insert into ${t.gaps} (consumer_name, instance_id, from_id, to_id, fence, observed_at)
      select ${name}, ${instanceId}, r.f, r.t, r.fence, r.observed_at
      from unnest(${pgArray(add.map((r) => r.from))}::int8[], ${pgArray(add.map((r) => r.to))}::int8[],
                  ${pgArray(add.map((r) => r.fence))}::xid8[],
                  ${pgArray(add.map((r) => r.observedAt.toISOString()))}::timestamptz[]) as r(f, t, fence, observed_at)`;
  }
  return add.length - removeFroms.length;
}

/** Every range of the consumer (operators, tests). */
export async function listRanges(
  tx: Queryable,
  t: Tables,
  name: string,
  instanceId: string,
): Promise<StoredRange[]> {
  return selectRangesToRecheck(tx, t, name, instanceId, { all: true, xmin: 0n, lowestEnded: null }, 0n);
}

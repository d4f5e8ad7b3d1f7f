// Helpers shared by this package's database tests (not exported from the package); the ones every
// package's tests share (until, gate, freshSchema, consumerRow, testDispatcher) are in @sluice/testing.
import { listRanges, type StoredRange } from './queries/gaps.js';
import { tables } from './schema/tables.js';
import type { Sql } from './sql-types.js';

export { testDispatcher } from '@sluice/testing/vitest';

export async function rangesOf(
  sql: Sql,
  schema: string,
  name: string,
  instanceId = '*',
): Promise<StoredRange[]> {
  return listRanges(sql, tables(sql, schema), name, instanceId);
}

/** [from, to] pairs, for readable assertions. */
export function spans(ranges: readonly StoredRange[]): [bigint, bigint][] {
  return ranges.map((r) => [r.from, r.to]);
}

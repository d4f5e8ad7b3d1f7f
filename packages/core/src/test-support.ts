// Helpers shared by this package's database tests (not exported from the package); the ones every
// package's tests share (until, gate, freshSchema, consumerRow) are in @sluice/testing.
import { onTestFinished } from 'vitest';
import type { Consumer } from './consumers/consumer.js';
import { createDispatcher, type Dispatcher } from './dispatcher/create-dispatcher.js';
import { silentLogger } from './logger.js';
import type { DispatcherOptions } from './options.js';
import { listRanges, type StoredRange } from './queries/gaps.js';
import { tables } from './schema/tables.js';
import type { Sql } from './sql-types.js';

/** A dispatcher without LISTEN or timers unless asked; stopped after the test. */
export function testDispatcher(
  sql: Sql,
  schema: string,
  consumers: readonly Consumer[],
  extra: Partial<DispatcherOptions> = {},
): Dispatcher {
  // Retries without delay unless a test asks for one: tests count attempts pass by pass.
  const dispatcher = createDispatcher({
    sql,
    schema,
    consumers,
    retryDelayMs: 0,
    logger: silentLogger,
    listen: false,
    ...extra,
  });
  onTestFinished(() => dispatcher.stop());
  return dispatcher;
}

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

// Helpers shared by this package's database tests (not exported from the package).
import { randomBytes } from 'node:crypto';
import type { TestDatabase } from '@sluice/testing/vitest';
import { onTestFinished } from 'vitest';
import type { Consumer } from './consumers/consumer.js';
import { createDispatcher, type Dispatcher } from './dispatcher/create-dispatcher.js';
import { silentLogger } from './logger.js';
import type { DispatcherOptions } from './options.js';
import { listRanges, type StoredRange } from './queries/gaps.js';
import { migrate } from './schema/migrate.js';
import { tables } from './schema/tables.js';
import type { Sql } from './sql-types.js';

/** A freshly migrated schema of its own for one test, so tests in a file do not see each other's events. */
export async function freshSchema(db: TestDatabase): Promise<string> {
  const schema = `t_${randomBytes(5).toString('hex')}`;
  await migrate(db.sql, { schema, logger: silentLogger });
  return schema;
}

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

export interface ConsumerRow {
  cursor: bigint;
  status: string;
  attempts: number;
  last_error: string | null;
  rearm_count: number;
  gap_count: number;
  failure_category: string | null;
  stuck_event_id: bigint | null;
}

export async function consumerRow(
  sql: Sql,
  schema: string,
  name: string,
  instanceId = '*',
): Promise<ConsumerRow> {
  const t = tables(sql, schema);
  const [row] = await sql<
    (Omit<ConsumerRow, 'cursor' | 'stuck_event_id'> & { cursor: string; stuck_event_id: string | null })[]
  >`
    select cursor::text, status, attempts, last_error, rearm_count, gap_count, failure_category, stuck_event_id::text
    from ${t.consumers} where name = ${name} and instance_id = ${instanceId}`;
  if (!row) throw new Error(`no consumer row ${name}/${instanceId}`);
  return {
    ...row,
    cursor: BigInt(row.cursor),
    stuck_event_id: row.stuck_event_id === null ? null : BigInt(row.stuck_event_id),
  };
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

/** Resolves once `condition` holds, checking every few ms; fails after `timeoutMs`. */
export async function until(
  condition: () => boolean | Promise<boolean>,
  timeoutMs = 10_000,
  what = 'condition',
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

/** A promise with its resolve function: a gate a handler can wait on. */
export function gate(): { promise: Promise<void>; open: () => void } {
  let open: () => void = () => undefined;
  const promise = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { promise, open };
}

import { migrate, silentLogger, type Sql } from '@sluice/core';
import { tables } from '@sluice/core/internal';
import { randomBytes } from 'node:crypto';

/** A freshly migrated Sluice schema of its own, so tests sharing a database do not see each other's events. */
export async function freshSchema(sql: Sql, prefix = 't'): Promise<string> {
  const schema = `${prefix}_${randomBytes(5).toString('hex')}`;
  await migrate(sql, { schema, logger: silentLogger });
  return schema;
}

/** A consumer's cursor row as a test checks it (ids as bigint: read as text, exact). */
export interface ConsumerRow {
  readonly cursor: bigint;
  readonly status: string;
  readonly attempts: number;
  readonly stuckEventId: bigint | null;
  readonly skipEventId: bigint | null;
  readonly lastError: string | null;
  readonly failureCategory: string | null;
  readonly disabledReason: string | null;
  readonly rearmCount: number;
  readonly gapCount: number;
}

/** Reads a consumer's row; throws when there is none. */
export async function consumerRow(
  sql: Sql,
  schema: string,
  name: string,
  instanceId = '*',
): Promise<ConsumerRow> {
  const t = tables(sql, schema);
  const [row] = await sql<
    {
      cursor: string;
      status: string;
      attempts: number;
      stuck_event_id: string | null;
      skip_event_id: string | null;
      last_error: string | null;
      failure_category: string | null;
      disabled_reason: string | null;
      rearm_count: number;
      gap_count: number;
    }[]
  >`
    select cursor::text, status, attempts, stuck_event_id::text, skip_event_id::text, last_error, failure_category,
           disabled_reason, rearm_count, gap_count
    from ${t.consumers} where name = ${name} and instance_id = ${instanceId}`;
  if (!row) throw new Error(`no consumer row ${schema}.${name}/${instanceId}`);
  const big = (text: string | null) => (text === null ? null : BigInt(text));
  return {
    cursor: BigInt(row.cursor),
    status: row.status,
    attempts: row.attempts,
    stuckEventId: big(row.stuck_event_id),
    skipEventId: big(row.skip_event_id),
    lastError: row.last_error,
    failureCategory: row.failure_category,
    disabledReason: row.disabled_reason,
    rearmCount: row.rearm_count,
    gapCount: row.gap_count,
  };
}

import type { Tables } from '../schema/tables.js';
import type { Queryable, TransactionSql } from '../sql-types.js';

export interface AuditEntry {
  readonly actor: string;
  readonly action: string;
  readonly consumerName: string | null;
  readonly instanceId: string | null;
  readonly cursorBefore: bigint | null;
  readonly cursorAfter: bigint | null;
  readonly details: Record<string, unknown>;
}

/** Records an action in the audit table, inside the transaction that performs it. */
export async function writeAudit(tx: TransactionSql, t: Tables, entry: AuditEntry): Promise<void> {
  await tx`
    insert into ${t.audit} (actor, action, consumer_name, instance_id, cursor_before, cursor_after, details)
    values (${entry.actor}, ${entry.action}, ${entry.consumerName}, ${entry.instanceId},
            ${entry.cursorBefore === null ? null : entry.cursorBefore.toString()}::bigint,
            ${entry.cursorAfter === null ? null : entry.cursorAfter.toString()}::bigint,
            ${JSON.stringify(entry.details, (_key, value: unknown) => (typeof value === 'bigint' ? value.toString() : value))}::text::jsonb)`;
  // ::text first: bound as jsonb, postgres.js would encode the JSON text again (a string scalar).
}

/**
 * The lowest id retention may have kept: events below it were pruned (from the audit of prune()).
 * 1 when nothing was ever pruned.
 */
export async function retentionFloor(tx: Queryable, t: Tables): Promise<bigint> {
  const [row] = await tx<{ floor: string | null }[]>`
    select max((details->>'before')::bigint)::text as floor from ${t.audit} where action = 'prune'`;
  return row?.floor ? BigInt(row.floor) : 1n;
}

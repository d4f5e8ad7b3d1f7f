import type { Tables } from '../schema/tables.js';
import { type Queryable, type TransactionSql, valuesOf } from '../sql-types.js';
import { beginningPosition } from '../consumer-state/consumer-state.js';

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
  // By position (see valuesOf): prune() reads it through the application's pool.
  const [[floor] = [null]] = await valuesOf<[floor: string | null]>(
    tx`select max((details->>'before')::bigint)::text from ${t.audit} where action = 'prune'`,
  );
  return floor ? BigInt(floor) : 1n;
}

/** Where "from the beginning" is, with `floor` the retention floor (see beginningPosition). */
export async function beginningOf(tx: Queryable, t: Tables, floor: bigint): Promise<bigint> {
  const [[oldest] = [null]] = await valuesOf<[oldest: string | null]>(
    tx`select min(id)::text from ${t.events}`,
  );
  return beginningPosition(floor, oldest === null ? null : BigInt(oldest));
}

/**
 * The log head: the newest event's id, or, once every event is pruned, the last one `floor` (the
 * retention floor) says was there. Nothing may claim a position above it.
 */
export async function logHead(tx: Queryable, t: Tables, floor: bigint): Promise<bigint> {
  const [[newest] = ['0']] = await valuesOf<[newest: string]>(
    tx`select coalesce(max(id), 0)::text from ${t.events}`,
  );
  const head = BigInt(newest);
  return head > floor - 1n ? head : floor - 1n;
}

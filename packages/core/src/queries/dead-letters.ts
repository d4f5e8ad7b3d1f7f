import type { EventRecord } from '../events.js';
import type { Tables } from '../schema/tables.js';
import type { TransactionSql } from '../sql-types.js';

export interface DeadLetterInput {
  readonly event: EventRecord;
  readonly reason: 'apply-error' | 'operator-skip';
  readonly error: string | null;
  readonly attempts: number;
}

/**
 * Copies skipped events into dead_letters (in the skipping transaction). Re-skipping an event updates its row.
 *
 * The payload is copied from the events row in SQL, as an operator's skip copies it
 * (copySkippedEvent): jsonb goes to jsonb exactly as stored, numbers beyond a double's precision
 * included, and never through JSON.stringify, which recurses and overflows the call stack on data
 * PostgreSQL accepts (thousands of levels deep). Serialised in JavaScript, such an event failed every
 * turn as an infrastructure failure, the consumer neither moving on nor stuck on it.
 */
export async function recordDeadLetters(
  tx: TransactionSql,
  t: Tables,
  name: string,
  instanceId: string,
  letters: readonly DeadLetterInput[],
): Promise<void> {
  for (const letter of letters) {
    const e = letter.event;
    const copied = await tx`
      insert into ${t.deadLetters} (consumer_name, instance_id, event_id, stream_id, type, data, metadata,
                                    event_created_at, reason, error, attempts)
      select ${name}, ${instanceId}, e.id, e.stream_id, e.type, e.data, e.metadata, e.created_at,
             ${letter.reason}, ${letter.error}, ${letter.attempts}
      from ${t.events} e where e.id = ${e.id.toString()}::bigint
      ${onConflict(tx)}`;
    if (copied.count > 0) continue;
    // The row is gone: a prune deleted it under this turn (a per-instance row past
    // staleInstanceTtlMs does not hold a prune back, docs/design.md §6.3). The event as the turn read
    // it is then the only copy left. JSON text goes in as ::text::jsonb: a parameter the server
    // describes as jsonb makes postgres.js JSON-encode the string a second time and store a JSON
    // string scalar (docs/design.md §3.1).
    await tx`
      insert into ${t.deadLetters} (consumer_name, instance_id, event_id, stream_id, type, data, metadata,
                                    event_created_at, reason, error, attempts)
      values (${name}, ${instanceId}, ${e.id.toString()}::bigint, ${e.streamId}, ${e.type},
              ${JSON.stringify(e.data)}::text::jsonb, ${JSON.stringify(e.metadata)}::text::jsonb, ${e.createdAt},
              ${letter.reason}, ${letter.error}, ${letter.attempts})
      ${onConflict(tx)}`;
  }
}

function onConflict(tx: TransactionSql) {
  return tx`
    on conflict (consumer_name, instance_id, event_id) do update set
      reason = excluded.reason, error = excluded.error, attempts = excluded.attempts,
      created_at = now(), replay_requested_at = null, replayed_at = null`;
}

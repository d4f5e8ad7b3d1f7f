import type { EventRecord } from '../events.js';
import type { Tables } from '../schema/tables.js';
import type { TransactionSql } from '../sql-types.js';

export interface DeadLetterInput {
  readonly event: EventRecord;
  readonly reason: 'apply-error' | 'operator-skip';
  readonly error: string | null;
  readonly attempts: number;
}

// JSON text goes in as ::text::jsonb: a parameter the server describes as jsonb makes postgres.js
// JSON-encode the string a second time and store a JSON string scalar (docs/design.md §3.1).

/** Copies skipped events into dead_letters (in the skipping transaction). Re-skipping an event updates its row. */
export async function recordDeadLetters(
  tx: TransactionSql,
  t: Tables,
  name: string,
  instanceId: string,
  letters: readonly DeadLetterInput[],
): Promise<void> {
  for (const letter of letters) {
    const e = letter.event;
    await tx`
      insert into ${t.deadLetters} (consumer_name, instance_id, event_id, stream_id, type, data, metadata,
                                    event_created_at, reason, error, attempts)
      values (${name}, ${instanceId}, ${e.id.toString()}::bigint, ${e.streamId}, ${e.type},
              ${JSON.stringify(e.data)}::text::jsonb, ${JSON.stringify(e.metadata)}::text::jsonb, ${e.createdAt},
              ${letter.reason}, ${letter.error}, ${letter.attempts})
      on conflict (consumer_name, instance_id, event_id) do update set
        reason = excluded.reason, error = excluded.error, attempts = excluded.attempts,
        created_at = now(), replay_requested_at = null, replayed_at = null`;
  }
}

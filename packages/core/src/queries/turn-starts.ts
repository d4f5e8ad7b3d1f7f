import type { Tables } from '../schema/tables.js';
import type { Sql, TransactionSql } from '../sql-types.js';

/**
 * Records, in its own committed transaction (on another pool connection), that a turn is about to
 * deliver ids [first, last]. Counts consecutive starts at the same first id: a start that never
 * reached its COMMIT was a crash (F6).
 *
 * The commit does not wait for its WAL flush (synchronous_commit off for this transaction only):
 * what it guards against is the Node process dying, and the row is visible to every session as
 * soon as it commits. Only a PostgreSQL crash in the next few hundred milliseconds can lose it,
 * and then one crash goes uncounted. Waiting for the flush cost a second disk flush per turn.
 */
export async function recordTurnStart(
  sql: Sql,
  t: Tables,
  name: string,
  instanceId: string,
  batch: { first: bigint; last: bigint; isolateUntil: bigint | null; resetCount: boolean },
): Promise<void> {
  await sql.begin((tx) => [
    tx`select set_config('synchronous_commit', 'off', true)`,
    tx`
    insert into ${t.turnStarts} as m (consumer_name, instance_id, first_event_id, last_event_id, started_count, isolate_until)
    values (${name}, ${instanceId}, ${batch.first.toString()}::bigint, ${batch.last.toString()}::bigint, 1,
            ${batch.isolateUntil === null ? null : batch.isolateUntil.toString()}::bigint)
    on conflict (consumer_name, instance_id) do update set
      started_count = case when m.first_event_id = excluded.first_event_id and not ${batch.resetCount}
                           then m.started_count + 1 else 1 end,
      first_event_id = excluded.first_event_id,
      last_event_id = excluded.last_event_id,
      isolate_until = excluded.isolate_until,
      updated_at = now()`,
  ]);
}

/** At the turn's commit: the start finished. Keeps the row only to carry crash isolation on. */
export async function finishTurnStart(
  tx: TransactionSql,
  t: Tables,
  name: string,
  instanceId: string,
  isolateUntil: bigint | null,
): Promise<void> {
  if (isolateUntil === null) {
    await tx`delete from ${t.turnStarts} where consumer_name = ${name} and instance_id = ${instanceId}`;
  } else {
    await tx`
      update ${t.turnStarts} set started_count = 0, isolate_until = ${isolateUntil.toString()}::bigint, updated_at = now()
      where consumer_name = ${name} and instance_id = ${instanceId}`;
  }
}

import type { Tables } from '../schema/tables.js';
import type { Queryable, Sql, TransactionSql } from '../sql-types.js';
import { settleWithin, TIMED_OUT } from '../time-limit.js';

/**
 * The turn start was not recorded in time: no connection of Sluice's pool came free, or the
 * statement did not answer (the database is overloaded). The turn is abandoned as an
 * infrastructure failure instead of waiting, inside its transaction, for what may only come free
 * when the turn itself ends.
 */
export class PoolExhaustedError extends Error {
  constructor(waitedMs: number, what = 'the turn start was not recorded') {
    super(
      `${what} within ${waitedMs} ms (statementTimeoutMs): ` +
        "no connection of Sluice's pool came free, or the database did not answer (behind a pooler: " +
        "its pool needs more server connections than the turns running at once, docs/operating.md 'Behind a pooler')",
    );
    this.name = 'PoolExhaustedError';
  }
}

/**
 * Waits at most `waitMs` for a statement a turn sends on Sluice's pool, outside its own
 * transaction (it must commit before the turn goes on).
 * @throws {PoolExhaustedError} naming `what` was not done, when it did not answer in time
 */
export async function answeredWithin(
  statement: Promise<unknown>,
  waitMs: number,
  what: string,
): Promise<void> {
  if ((await settleWithin(statement, waitMs)) === TIMED_OUT) {
    statement.catch(() => undefined);
    throw new PoolExhaustedError(waitMs, what);
  }
}

/**
 * Records, in its own committed statement (on another connection of Sluice's pool, waited for at
 * most `waitMs`), that a turn is about to deliver ids [first, last]. Counts consecutive starts at the
 * same first id: a start that never reached its COMMIT was a crash (F6). `onSending` is called just
 * before the statement goes out.
 *
 * The commit does not wait for its WAL flush (synchronous_commit off for this statement's
 * transaction only): what it guards against is the Node process dying, and the row is visible to
 * every session as soon as it commits. Only a PostgreSQL crash in the next few hundred milliseconds
 * can lose it, and then one crash goes uncounted. Waiting for the flush cost a second disk flush per turn.
 * @throws {PoolExhaustedError}
 */
export async function recordTurnStart(
  sql: Sql,
  t: Tables,
  name: string,
  instanceId: string,
  batch: { first: bigint; last: bigint; isolateUntil: bigint | null; resetCount: boolean },
  waitMs: number,
  onSending: () => void,
): Promise<void> {
  // A plain statement, not a reserved connection: postgres.js 3.4.9 puts a reserved connection that
  // closed meanwhile back into the pool as open when it is released, and the next statement sent
  // to it stops the process (see connections/own-connections.ts).
  const recording = sql`
      with async_commit as (select set_config('synchronous_commit', 'off', true))
      insert into ${t.turnStarts} as m (consumer_name, instance_id, first_event_id, last_event_id, started_count, isolate_until)
      select ${name}, ${instanceId}, ${batch.first.toString()}::bigint, ${batch.last.toString()}::bigint, 1,
             ${batch.isolateUntil === null ? null : batch.isolateUntil.toString()}::bigint
      from async_commit
      on conflict (consumer_name, instance_id) do update set
        started_count = case when ${batch.resetCount} then 1
                             when m.first_event_id = excluded.first_event_id then m.started_count + 1
                             -- isolating: crashes not yet pinned on an event move on with it
                             when excluded.isolate_until is not null and m.first_event_id < excluded.first_event_id
                             then m.started_count + 1
                             else 1 end,
        first_event_id = excluded.first_event_id,
        last_event_id = excluded.last_event_id,
        isolate_until = excluded.isolate_until,
        updated_at = now()`;
  // From here on the start may be recorded, even if no answer comes back.
  onSending();
  await answeredWithin(recording, waitMs, 'the turn start was not recorded');
}

/**
 * Takes a turn's start back (it was no crash) in its own committed statement on Sluice's pool,
 * waited for at most `waitMs`: a transactional handler's turn that timed out does so before its
 * transaction ends, while it still holds the consumer row. An instance that takes the row over the
 * moment it is free must not count that start as a crash: it would charge the batch's isolation,
 * and an event after the one that timed out would meet its first failure with one attempt already
 * spent (docs/design.md §4.7).
 * @throws {PoolExhaustedError}
 */
export async function takeBackTurnStart(
  sql: Sql,
  t: Tables,
  name: string,
  instanceId: string,
  waitMs: number,
): Promise<void> {
  await answeredWithin(
    startTakenBack(sql, t, name, instanceId),
    waitMs,
    'the timed-out turn start was not taken back',
  );
}

/**
 * The one statement that takes one recorded turn start back: the turn ended without a crash (an
 * attempt recorded, an infrastructure failure, a timed-out turn rolled back), so that start must
 * not count as one. Never below zero: another instance may have judged the start already.
 */
export function startTakenBack(q: Queryable, t: Tables, name: string, instanceId: string) {
  return q`
    update ${t.turnStarts} set started_count = greatest(started_count - 1, 0), updated_at = now()
    where consumer_name = ${name} and instance_id = ${instanceId}`;
}

/**
 * At the turn's commit: the start finished. Outside isolation the row goes. While isolating a
 * crashed batch one event at a time, the row stays, and so do the crashes this start was charged
 * with (minus the start itself): the event just delivered did not cause them, so they travel on to
 * the next event of the batch, and a crash-poison event further on is dead after exactly
 * maxAttempts crashes, the batch's crash included (docs/reliability.md#c8). `taken`: 'start' takes
 * this turn's start off; 'none' takes nothing (no handler ran on the crashes' account: they travel
 * on); 'all' clears them (a crashed-out event was ended on them: they were its own).
 */
export async function finishTurnStart(
  tx: TransactionSql,
  t: Tables,
  name: string,
  instanceId: string,
  isolateUntil: bigint | null,
  taken: 'start' | 'none' | 'all' = 'start',
): Promise<void> {
  if (isolateUntil === null) {
    await tx`delete from ${t.turnStarts} where consumer_name = ${name} and instance_id = ${instanceId}`;
  } else {
    const count =
      taken === 'all' ? tx`0` : taken === 'none' ? tx`started_count` : tx`greatest(started_count - 1, 0)`;
    await tx`
      update ${t.turnStarts}
      set started_count = ${count}, isolate_until = ${isolateUntil.toString()}::bigint, updated_at = now()
      where consumer_name = ${name} and instance_id = ${instanceId}`;
  }
}

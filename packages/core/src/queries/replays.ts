import type { EventRecord, JsonObject } from '../events.js';
import type { Tables } from '../schema/tables.js';
import type { Fragment, Queryable, Sql, TransactionSql } from '../sql-types.js';
import { settleWithin } from '../time-limit.js';
import { pgArray } from './pg-array.js';
import { answeredWithin } from './turn-starts.js';

export interface ReplayRow {
  deadLetterId: bigint;
  event: EventRecord;
}

interface Row {
  id: string;
  event_id: string;
  stream_id: string;
  type: string;
  data: JsonObject;
  metadata: JsonObject;
  event_created_at: Date;
}

/** Dead letters whose replay an operator requested, oldest first, rebuilt from their copies. */
export async function selectRequestedReplays(
  tx: TransactionSql,
  t: Tables,
  name: string,
  instanceId: string,
  limit: number,
): Promise<ReplayRow[]> {
  const rows = await tx<Row[]>`
    select d.id::text, d.event_id::text, d.stream_id, d.type, d.data, d.metadata, d.event_created_at
    from ${t.deadLetters} d
    where d.consumer_name = ${name} and d.instance_id = ${instanceId}
      and d.replay_requested_at is not null and d.replayed_at is null
    order by d.id limit ${limit}`;
  return rows.map((r) => ({
    deadLetterId: BigInt(r.id),
    event: {
      id: BigInt(r.event_id),
      streamId: r.stream_id,
      type: r.type,
      data: r.data,
      metadata: r.metadata,
      createdAt: r.event_created_at,
    },
  }));
}

/**
 * What a replay request becomes when the process stops while its handler runs: put ahead of the
 * dead letter's (or parked key's) error, and taken off again by a turn that commits.
 */
export const REPLAY_CRASH_NOTE =
  'the replay did not finish (the process stopped, or its connection was lost, while the handler ran; ask again): ';

/**
 * Before a replay calls the handler, in a statement of its own that commits at once (docs/guarantees.md,
 * "Crashes count"): the requests are cleared, with {@link REPLAY_CRASH_NOTE} ahead of the error, so
 * that a process that dies in the handler does not replay them again at every start. The turn, if
 * it commits, marks them replayed, or failed, or asked for again, as it always did.
 * @throws {PoolExhaustedError} when the statement is not answered within `waitMs`
 */
export async function claimReplays(sql: Sql, t: Tables, claim: ReplayClaim, waitMs: number): Promise<void> {
  const { table, rows } = claimed(sql, t, claim);
  await answeredWithin(
    sql`update ${table} set replay_requested_at = null, error = ${noted(sql)}
        where ${rows} and replay_requested_at is not null`,
    waitMs,
    'the replay was not claimed',
  );
}

/** Replays whose requests a turn cleared before their handler ran (claimReplays). */
export type ReplayClaim =
  | { readonly deadLetterIds: readonly bigint[] }
  | { readonly consumer: string; readonly keys: readonly string[] };

/** The table of a claim and which of its rows it claimed (a dead letter not replayed yet). */
function claimed(sql: Sql, t: Tables, claim: ReplayClaim) {
  return 'deadLetterIds' in claim
    ? {
        table: t.deadLetters,
        rows: sql`id = any(${pgArray(claim.deadLetterIds)}::int8[]) and replayed_at is null`,
      }
    : {
        table: t.parkedKeys,
        rows: sql`consumer_name = ${claim.consumer} and key = any(${pgArray(claim.keys)}::text[])`,
      };
}

/**
 * A replay whose handler timed out in a transactional turn (rolled back whole): the dead letter or
 * parked key of `eventId` in `claim` has its request cleared and the timeout as its error, one
 * attempt more, as a replay that failed (finishReplays, finishParkedReplay). The consumer row is
 * not touched: the event is below its cursor. In a statement of its own, at most `waitMs`.
 */
export async function replayTimedOut(
  sql: Sql,
  t: Tables,
  claim: ReplayClaim,
  eventId: bigint,
  error: string,
  waitMs: number,
): Promise<void> {
  const id = eventId.toString();
  const statement =
    'deadLetterIds' in claim
      ? sql`
          update ${t.deadLetters} set replay_requested_at = null, error = ${error}, attempts = attempts + 1
          where id = any(${pgArray(claim.deadLetterIds)}::int8[]) and event_id = ${id}::bigint and replayed_at is null`
      : sql`
          update ${t.parkedKeys} k set replay_requested_at = null, error = ${error}, attempts = attempts + 1,
            updated_at = now()
          where k.consumer_name = ${claim.consumer} and k.key = any(${pgArray(claim.keys)}::text[])
            and exists (select 1 from ${t.parkedEvents} e
                        where e.consumer_name = k.consumer_name and e.key = k.key and e.event_id = ${id}::bigint)`;
  await answeredWithin(statement, waitMs, 'the timed-out replay was not recorded');
}

/**
 * After a turn that claimed replays failed while its process lives on (a lost connection, a
 * timeout, a later handler's timeout: the turn rolled back, the replays with it): they are asked
 * for again, their note taken off. Not after a crash: no one is left to do it. Best effort, in a
 * statement of its own, at most `waitMs`.
 */
export async function askReplaysAgain(
  sql: Sql,
  t: Tables,
  claims: readonly ReplayClaim[],
  waitMs: number,
): Promise<void> {
  for (const claim of claims) {
    const { table, rows } = claimed(sql, t, claim);
    const asking = sql`
      update ${table} set replay_requested_at = now(), error = ${unnoted(sql)}
      where ${rows} and replay_requested_at is null and starts_with(error, ${REPLAY_CRASH_NOTE})`;
    await settleWithin(asking, waitMs).catch(() => undefined);
    asking.catch(() => undefined);
  }
}

/** The error column without the note (null when nothing else was there). */
export function unnoted(sql: Queryable): Fragment {
  return sql`case when starts_with(error, ${REPLAY_CRASH_NOTE})
                  then nullif(substr(error, ${REPLAY_CRASH_NOTE.length + 1}), '') else error end`;
}

/** The error column with the note ahead of it, once (a replay that did not finish twice has it once). */
function noted(sql: Sql): Fragment {
  return sql`case when starts_with(coalesce(error, ''), ${REPLAY_CRASH_NOTE}) then error
                  else ${REPLAY_CRASH_NOTE} || coalesce(error, '') end`;
}

/** Marks replays done, or failed (the request is cleared; an operator can ask again). */
export async function finishReplays(
  tx: TransactionSql,
  t: Tables,
  done: readonly bigint[],
  failed: { deadLetterId: bigint; error: string } | undefined,
  /** Claimed but not reached in this turn (its time ran out): asked for again. */
  notReached: readonly bigint[] = [],
): Promise<void> {
  if (notReached.length > 0) {
    await tx`
      update ${t.deadLetters} set replay_requested_at = now(),
        error = ${unnoted(tx)}
      where id = any(${pgArray(notReached)}::int8[]) and replayed_at is null`;
  }
  if (done.length > 0) {
    await tx`
      update ${t.deadLetters} set replayed_at = now(), error = ${unnoted(tx)}
      where id = any(${`{${done.join(',')}}`}::int8[])`;
  }
  if (failed) {
    await tx`
      update ${t.deadLetters} set replay_requested_at = null, error = ${failed.error}, attempts = attempts + 1
      where id = ${failed.deadLetterId.toString()}::bigint`;
  }
}

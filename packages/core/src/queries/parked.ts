// Parked keys (docs/design.md §11.4): what a turn writes when it sets events aside under a parked
// key, and what it reads and writes when an operator asked for a parked key to be replayed.
import type { EventRecord, JsonObject } from '../events.js';
import type { Lane } from '../lanes/lanes.js';
import type { Tables } from '../schema/tables.js';
import type { Queryable, TransactionSql } from '../sql-types.js';
import { pgArray } from './pg-array.js';
import { unnoted } from './replays.js';

/** An event set aside under its parked key (`error`: the failure that parked the key). */
export interface ParkedWrite {
  readonly event: EventRecord;
  readonly key: string;
  readonly error: string | null;
  readonly attempts: number;
}

/**
 * Records the events a turn set aside, in the turn's transaction: a key parked by one of them gets
 * its parked_keys row (one already there is kept: the key was parked before), and every event is
 * copied whole into parked_events. Returns the keys this call parked anew.
 */
export async function recordParked(
  tx: TransactionSql,
  t: Tables,
  consumer: string,
  parked: readonly ParkedWrite[],
): Promise<string[]> {
  if (parked.length === 0) return [];
  const firsts = new Map<string, ParkedWrite>();
  for (const p of parked) if (p.error !== null && !firsts.has(p.key)) firsts.set(p.key, p);
  const fresh: string[] = [];
  for (const first of firsts.values()) {
    const [row] = await tx<{ fresh: boolean }[]>`
      insert into ${t.parkedKeys} as k (consumer_name, key, first_event_id, error, attempts)
      values (${consumer}, ${first.key}, ${first.event.id.toString()}::bigint, ${first.error}, ${first.attempts})
      on conflict (consumer_name, key) do update set
        error = excluded.error, attempts = excluded.attempts, replay_requested_at = null, updated_at = now(),
        first_event_id = least(k.first_event_id, excluded.first_event_id)
      returning k.xmax = 0 as fresh`;
    if (row?.fresh === true) fresh.push(first.key);
  }
  // Copied from the events rows in SQL, not serialised in JavaScript: see recordDeadLetters
  // (queries/dead-letters.ts), which copies the same way and for the same reasons.
  const copied = await tx<{ id: string }[]>`
    insert into ${t.parkedEvents} as pe (consumer_name, key, event_id, stream_id, type, data, metadata,
                                   event_created_at, error)
    select ${consumer}, p.key, e.id, e.stream_id, e.type, e.data, e.metadata, e.created_at, p.error
    from unnest(${pgArray(parked.map((p) => p.key))}::text[], ${pgArray(parked.map((p) => p.event.id))}::int8[],
                ${pgArray(parked.map((p) => p.error))}::text[]) as p(key, id, error)
    join ${t.events} e on e.id = p.id
    ${parkedConflict(tx)}
    returning pe.event_id::text as id`;
  const found = new Set(copied.map((row) => row.id));
  const gone = parked.filter((p) => !found.has(p.event.id.toString()));
  // An event whose row is not there (recordDeadLetters says how a prune can delete one under a turn)
  // is written as the turn read it: nothing set aside is lost. JSON text goes in as ::text::jsonb
  // (see queries/dead-letters.ts).
  if (gone.length > 0) {
    await tx`
      insert into ${t.parkedEvents} as pe (consumer_name, key, event_id, stream_id, type, data, metadata,
                                     event_created_at, error)
      select ${consumer}, p.key, p.id, p.stream_id, p.type, p.data::jsonb, p.metadata::jsonb, p.created_at, p.error
      from unnest(${pgArray(gone.map((p) => p.key))}::text[], ${pgArray(gone.map((p) => p.event.id))}::int8[],
                  ${pgArray(gone.map((p) => p.event.streamId))}::text[], ${pgArray(gone.map((p) => p.event.type))}::text[],
                  ${pgArray(gone.map((p) => JSON.stringify(p.event.data)))}::text[],
                  ${pgArray(gone.map((p) => JSON.stringify(p.event.metadata)))}::text[],
                  ${pgArray(gone.map((p) => p.event.createdAt.toISOString()))}::timestamptz[],
                  ${pgArray(gone.map((p) => p.error))}::text[])
           as p(key, id, stream_id, type, data, metadata, created_at, error)
      ${parkedConflict(tx)}`;
  }
  return fresh;
}

/** A second setting aside of an event keeps the error that parked its key. */
function parkedConflict(tx: TransactionSql) {
  return tx`on conflict (consumer_name, key, event_id) do update set error = coalesce(excluded.error, pe.error)`;
}

/** A parked key whose replay an operator asked for, with its events to deliver, oldest first. */
export interface ParkedReplay {
  readonly key: string;
  readonly events: readonly EventRecord[];
  /** More of its parked events wait beyond `events`. */
  readonly more: boolean;
}

interface ParkedEventRow {
  key: string;
  event_id: string;
  stream_id: string;
  type: string;
  data: JsonObject;
  metadata: JsonObject;
  event_created_at: Date;
  more: boolean;
}

/**
 * The parked keys of `consumer` whose replay was asked for and that belong to `lane` (the lane
 * owning the key under the consumer's current lane count), with up to `limit` of their events each.
 */
export async function selectParkedReplays(
  tx: Queryable,
  t: Tables,
  consumer: string,
  lane: Lane,
  limit: number,
): Promise<ParkedReplay[]> {
  const rows = await tx<ParkedEventRow[]>`
    select k.key, e.event_id::text, e.stream_id, e.type, e.data, e.metadata, e.event_created_at, e.more
    from ${t.parkedKeys} k
    cross join lateral (
      select pe.*, count(*) over () > ${limit} as more from ${t.parkedEvents} pe
      where pe.consumer_name = k.consumer_name and pe.key = k.key
      order by pe.event_id limit ${limit + 1}
    ) e
    where k.consumer_name = ${consumer} and k.replay_requested_at is not null
      and abs(hashtextextended(k.key, 0) % ${lane.count}) = ${lane.index}
    order by k.key, e.event_id`;
  const byKey = new Map<string, { events: EventRecord[]; more: boolean }>();
  for (const r of rows) {
    let entry = byKey.get(r.key);
    if (!entry) byKey.set(r.key, (entry = { events: [], more: r.more }));
    if (entry.events.length < limit) {
      entry.events.push({
        id: BigInt(r.event_id),
        streamId: r.stream_id,
        type: r.type,
        data: r.data,
        metadata: r.metadata,
        createdAt: r.event_created_at,
      });
    }
  }
  return [...byKey].map(([key, entry]) => ({ key, events: entry.events, more: entry.more }));
}

/**
 * What a replay of `key` did: its `delivered` events are removed; the key is unparked when
 * nothing of it is left parked, else (`failedAgain`: one failed again and it and the rest stay
 * parked) its request is cleared. Returns whether the key is unparked.
 */
export async function finishParkedReplay(
  tx: TransactionSql,
  t: Tables,
  consumer: string,
  key: string,
  delivered: readonly bigint[],
  failedAgain: { readonly error: string; readonly attempts: number } | undefined,
): Promise<boolean> {
  if (delivered.length > 0) {
    await tx`
      delete from ${t.parkedEvents}
      where consumer_name = ${consumer} and key = ${key} and event_id = any(${pgArray(delivered)}::int8[])`;
  }
  if (failedAgain) {
    // Parked again from the event that failed: the first of the key's events left.
    await tx`
      update ${t.parkedKeys} k set replay_requested_at = null, error = ${failedAgain.error},
        attempts = ${failedAgain.attempts}, updated_at = now(),
        first_event_id = coalesce(
          (select min(e.event_id) from ${t.parkedEvents} e where e.consumer_name = k.consumer_name and e.key = k.key),
          k.first_event_id)
      where k.consumer_name = ${consumer} and k.key = ${key}`;
    return false;
  }
  // Held before the events are counted, in a statement of its own: a turn of an old lane still
  // draining a change of lanes (docs/design.md §11.3) may be setting an event of this key aside
  // right now. Its insert holds the key's row (the foreign key) until it commits; the count below
  // then sees that event, and the key stays parked with it. In one statement the count would be
  // read before that commit, and the cascade of the key's delete would take the new event with it.
  await tx`select 1 from ${t.parkedKeys} where consumer_name = ${consumer} and key = ${key} for update`;
  const unparked = await tx`
    delete from ${t.parkedKeys} k
    where k.consumer_name = ${consumer} and k.key = ${key}
      and not exists (select 1 from ${t.parkedEvents} e where e.consumer_name = k.consumer_name and e.key = k.key)`;
  if (unparked.count > 0) return true;
  // Events of the key are left (beyond this turn's batch, or set aside meanwhile): the replay goes
  // on in the next turn. Its request was cleared before the handler ran (claimReplays): asked again.
  await tx`
    update ${t.parkedKeys} set replay_requested_at = coalesce(replay_requested_at, now()),
      error = ${unnoted(tx)}
    where consumer_name = ${consumer} and key = ${key}`;
  return false;
}

/**
 * The row of the lane that owns `key` for `consumer` now (docs/design.md §11.4): its '*' row, or
 * lane abs(hashtextextended(key, 0) % N) of the consumer's current lane count (the new one once a
 * change of lanes has switched over); undefined when it has no shared row.
 */
export async function laneOwning(
  tx: Queryable,
  t: Tables,
  consumer: string,
  key: string,
): Promise<string | undefined> {
  const [row] = await tx<{ instance_id: string | null }[]>`
    with current as (
      select coalesce(
        (select case when l.switched_at is null then l.from_lanes else l.to_lanes end
         from ${t.laneChanges} l where l.consumer_name = ${consumer}),
        (select max(case when c.instance_id = '*' then 1 else split_part(c.instance_id, '/', 2)::int end)
         from ${t.consumers} c where c.name = ${consumer} and (c.instance_id = '*' or c.instance_id like '*%/%'))
      ) as lanes
    )
    select case when lanes is null then null
                when lanes = 1 then '*'
                else '*' || abs(hashtextextended(${key}, 0) % lanes)::text || '/' || lanes::text end as instance_id
    from current`;
  return row?.instance_id ?? undefined;
}

/** A parked key, held for an operator's change (FOR UPDATE); undefined when it is not parked. */
export async function lockParkedKey(
  tx: TransactionSql,
  t: Tables,
  consumer: string,
  key: string,
): Promise<{ events: number; replayRequested: boolean } | undefined> {
  const [row] = await tx<{ key: string }[]>`
    select key from ${t.parkedKeys} where consumer_name = ${consumer} and key = ${key} for update`;
  if (!row) return undefined;
  const [read] = await tx<{ events: number; replay: boolean }[]>`
    select (select count(*)::int from ${t.parkedEvents} e where e.consumer_name = k.consumer_name and e.key = k.key) as events,
           k.replay_requested_at is not null as replay
    from ${t.parkedKeys} k where k.consumer_name = ${consumer} and k.key = ${key}`;
  return read ? { events: read.events, replayRequested: read.replay } : undefined;
}

/** Asks for a parked key's events to be delivered again, in order, by its lane's next turn. */
export async function requestParkedReplay(
  tx: TransactionSql,
  t: Tables,
  consumer: string,
  key: string,
  actor: string,
): Promise<void> {
  await tx`
    update ${t.parkedKeys} set replay_requested_at = now(), replayed_by = ${actor}, updated_at = now()
    where consumer_name = ${consumer} and key = ${key}`;
}

/** Deletes a parked key and its parked events (an operator gave them up); returns how many events. */
export async function deleteParkedKey(
  tx: TransactionSql,
  t: Tables,
  consumer: string,
  key: string,
): Promise<number> {
  const deleted = await tx`
    delete from ${t.parkedEvents} where consumer_name = ${consumer} and key = ${key}`;
  await tx`delete from ${t.parkedKeys} where consumer_name = ${consumer} and key = ${key}`;
  return deleted.count;
}

// How lanes read the log (docs/design.md §11.2): the lanes of one process catching up read it about
// once between them (group reads), and a lane's filtered fetch returns every visible id, its own
// events whole and the others as runs of ids.
import { appendEvents, drainUntilIdle, freshSchema } from '@sluice/testing';
import { testDispatcher, useTestDatabase } from '@sluice/testing/vitest';
import { expect, test } from 'vitest';
import { append } from '../append.js';
import { PASSED_TYPE, type EventRecord } from '../events.js';
import { laneInstanceIds, STREAM_KEY } from '../lanes/lanes.js';
import { fetchBatch, fetchFilteredBatch, type FetchFilter } from '../queries/events.js';
import { tables } from '../schema/tables.js';

const db = await useTestDatabase();

/** A group read (fetchBatch with lanes) among the statements a pool sends. */
const isGroupRead = (query: string) =>
  query.includes('hashtextextended') &&
  query.includes('order by u.id limit') &&
  !query.includes('kept_total');
const isFilteredFetch = (query: string) => query.includes('kept_total');

test('8 lanes catching up on one process read the log about once between them, and each gets its own events in order', async () => {
  const schema = await freshSchema(db.sql, 'lanereads');
  const events = 4_000;
  await appendEvents(db.sql, events, (n) => ({ streamId: `s-${n % 50}`, type: 'T', data: { n } }), schema);
  const counts = { groupReads: 0, filtered: 0 };
  const sql = db.connect({
    max: 10,
    debug: (_connection, query) => {
      if (isGroupRead(query)) counts.groupReads += 1;
      if (isFilteredFetch(query)) counts.filtered += 1;
    },
  });
  const seen: { event: EventRecord; lane: string }[] = [];
  const dispatcher = testDispatcher(
    sql,
    schema,
    [
      {
        name: 'fanout',
        lanes: 8,
        batchSize: 50,
        handler: (event, ctx) => {
          seen.push({ event, lane: ctx.instanceId });
        },
      },
    ],
    { concurrency: 8 },
  );
  await dispatcher.ensureRegistered();
  await drainUntilIdle(dispatcher);

  expect(seen.map((s) => s.event.id).sort((a, b) => (a < b ? -1 : 1))).toEqual(
    Array.from({ length: events }, (_, i) => BigInt(i + 1)),
  );
  // Each event reached the lane its key hashes to (as the filtered fetch computes it), in order
  // per stream.
  const hashed = await db.sql<{ stream_id: string; lane: number }[]>`
    select distinct e.stream_id, abs(hashtextextended(e.stream_id, 0) % 8)::int as lane
    from ${db.sql(schema)}.events e`;
  const laneOfStream = new Map(hashed.map((r) => [r.stream_id, `*${r.lane}/8`]));
  expect(new Set(laneOfStream.values()).size).toBeGreaterThan(4);
  const lastOfStream = new Map<string, bigint>();
  for (const { event, lane } of seen) {
    expect(lane, `event ${event.id}`).toBe(laneOfStream.get(event.streamId));
    expect(event.id > (lastOfStream.get(event.streamId) ?? 0n)).toBe(true);
    lastOfStream.set(event.streamId, event.id);
  }
  // Plain lane turns read through group reads only. With every lane reading for itself (take
  // and read-ahead turned off) this run makes over 30 of them: each lane reads each stretch of
  // the log, from 400 rows a read growing to 4,000. Shared, the log is read about once.
  expect(counts.filtered).toBe(0);
  expect(counts.groupReads).toBeGreaterThan(0);
  expect(counts.groupReads).toBeLessThanOrEqual(24);
  // Every lane at the head and idle: a lane that took the log's last batch read on after its
  // lock to know it had caught up.
  const rows = await db.sql<{ instance_id: string; cursor: string; status: string }[]>`
    select instance_id, cursor::text, status from ${db.sql(schema)}.consumers where name = 'fanout'`;
  expect(rows.map((r) => r.instance_id).sort()).toEqual(laneInstanceIds(8).sort());
  for (const row of rows) expect([row.cursor, row.status]).toEqual([String(events), 'idle']);
});

test("a lane's filtered fetch returns every visible id above its cursor (its own events whole, runs of the others), cut before its (keptLimit + 1)-th", async () => {
  const schema = await freshSchema(db.sql, 'lanereads');
  const t = tables(db.sql, schema);
  await appendEvents(
    db.sql,
    40,
    (n) => ({ streamId: `s-${n % 9}`, type: n % 2 ? 'A' : 'B', data: {} }),
    schema,
  );
  // Holes: ids drawn by transactions that rolled back.
  for (let hole = 0; hole < 3; hole++) {
    await db.sql
      .begin(async (tx) => {
        await tx`insert into ${tx(schema)}.events (stream_id, type, data) values ('gone', 'X', '{}')`;
        throw new Error('rolled back');
      })
      .catch(() => undefined);
    await appendEvents(db.sql, 5, (n) => ({ streamId: `s-${n % 9}`, type: 'A', data: {} }), schema);
  }
  const lanes = await db.sql<{ id: string; lane: number }[]>`
    select e.id::text as id, abs(hashtextextended(e.stream_id, 0) % 3)::int as lane
    from ${db.sql(schema)}.events e order by e.id`;
  const all = await fetchBatch(db.sql, t, 4n, { from: [], to: [] }, 1_000);
  const visible = all.events.map((e) => e.id);
  expect(visible.length).toBe(51);
  const filter = (laneIndex: number, keptLimit: number, types: string[] | null): FetchFilter => ({
    consumer: 'c',
    laneIndex,
    laneCount: 3,
    key: STREAM_KEY,
    types,
    parking: false,
    cap: null,
    keptLimit,
  });
  const typeOf = new Map(all.events.map((e) => [e.id, e.type]));
  for (const laneIndex of [0, 1, 2]) {
    for (const types of [null, ['A']]) {
      const expectedOwn = lanes
        .filter((r) => BigInt(r.id) > 4n && r.lane === laneIndex)
        .map((r) => BigInt(r.id))
        .filter((id) => types === null || types.includes(typeOf.get(id) ?? ''));
      const whole = await fetchFilteredBatch(
        db.sql,
        t,
        4n,
        { from: [], to: [] },
        1_000,
        filter(laneIndex, 1_000, types),
      );
      expect(whole.events.map((e) => e.id)).toEqual(visible);
      expect(whole.events.filter((e) => e.type !== PASSED_TYPE).map((e) => e.id)).toEqual(expectedOwn);
      expect(whole.cut).toBe(false);
      // Cut: every visible id before the third kept event.
      const cut = await fetchFilteredBatch(
        db.sql,
        t,
        4n,
        { from: [], to: [] },
        1_000,
        filter(laneIndex, 2, types),
      );
      const third = expectedOwn[2];
      if (third === undefined) continue;
      expect(cut.events.map((e) => e.id)).toEqual(visible.filter((id) => id < third));
      expect(cut.cut).toBe(true);
    }
  }
});

test('an id read twice (a re-fetched range and the ids above the cursor) never joins two stretches across a hole', async () => {
  const schema = await freshSchema(db.sql, 'lanereads');
  const t = tables(db.sql, schema);
  const [other] = await db.sql<{ s: string }[]>`
    select s from unnest(array['a', 'b', 'c', 'd', 'e', 'f']) s
    where abs(hashtextextended(s, 0) % 2) = 1 limit 1`;
  const stream = other?.s ?? 'a';
  await appendEvents(db.sql, 4, () => ({ streamId: stream, type: 'T', data: {} }), schema);
  await db.sql
    .begin(async (tx) => {
      await tx`insert into ${tx(schema)}.events (stream_id, type, data) values (${stream}, 'T', '{}')`;
      throw new Error('rolled back: id 5 is a hole');
    })
    .catch(() => undefined);
  await appendEvents(db.sql, 3, () => ({ streamId: stream, type: 'T', data: {} }), schema);
  // Range [4, 4] re-fetched from cursor 3: id 4 comes twice.
  const batch = await fetchFilteredBatch(db.sql, t, 3n, { from: [4n], to: [4n] }, 100, {
    consumer: 'c',
    laneIndex: 0,
    laneCount: 2,
    key: STREAM_KEY,
    types: null,
    parking: false,
    cap: null,
    keptLimit: 50,
  });
  expect([...new Set(batch.events.map((e) => e.id))]).toEqual([4n, 6n, 7n, 8n]);
});

test("events a turn's replays append through ctx.tx are never handed to another lane", async () => {
  const schema = await freshSchema(db.sql, 'lanereads');
  const streams = await db.sql<{ s: string; lane: number }[]>`
    select s, abs(hashtextextended(s, 0) % 2)::int as lane
    from unnest(array['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h']) s`;
  const zero = streams.find((r) => r.lane === 0)?.s ?? 'a';
  const one = streams.find((r) => r.lane === 1)?.s ?? 'b';
  const laneOne: EventRecord[] = [];
  let laneOneGotLater: () => void = () => undefined;
  const gotLater = new Promise<void>((resolve) => (laneOneGotLater = resolve));
  let replaying = false;
  const dispatcher = testDispatcher(
    db.sql,
    schema,
    [
      {
        name: 'proj',
        lanes: 2,
        transactional: true,
        handlerTimeoutMs: 300,
        handler: async (event, ctx) => {
          if (ctx.instanceId === '*1/2') {
            laneOne.push(event);
            if (event.type === 'later') laneOneGotLater();
            return;
          }
          if (!replaying) return;
          if (!ctx.tx) throw new Error('a transactional handler has ctx.tx');
          if (event.type === 'trigger') {
            // The replayed dead letter appends, in lane 0's turn: an event of each lane.
            await append(
              ctx.tx,
              [
                { streamId: one, type: 'derived', data: {} },
                { streamId: zero, type: 'hang', data: {} },
              ],
              { schema, wakeUp: 'none' },
            );
          } else if (event.type === 'hang') {
            replaying = false; // once: the replay that follows the rollback goes through
            // Lane 0 has read past its replays; lane 1 turns now (a committed event of its own
            // waits), then lane 0's turn overruns its time and rolls back with its appends.
            await appendEvents(db.sql, 1, () => ({ streamId: one, type: 'later', data: {} }), schema);
            void dispatcher.runOnce();
            await gotLater;
            // Returns past handlerTimeoutMs (300 ms): by then the turn was rolled back.
            await new Promise((resolve) => setTimeout(resolve, 600));
          }
        },
      },
    ],
    { concurrency: 4 },
  );
  await dispatcher.ensureRegistered();
  await appendEvents(db.sql, 1, () => ({ streamId: zero, type: 'trigger', data: {} }), schema);
  await drainUntilIdle(dispatcher);
  await db.sql`
    insert into ${db.sql(schema)}.dead_letters
      (consumer_name, instance_id, event_id, stream_id, type, data, metadata, event_created_at, reason,
       replay_requested_at)
    values ('proj', '*0/2', 1, ${zero}, 'trigger', '{}', '{}', now(), 'operator-skip', now())`;
  replaying = true;
  await dispatcher.runOnce();

  const logged = new Set(
    (await db.sql<{ id: string }[]>`select id::text from ${db.sql(schema)}.events`).map((r) => BigInt(r.id)),
  );
  expect(laneOne.map((e) => e.type)).toContain('later');
  expect(laneOne.filter((e) => !logged.has(e.id))).toEqual([]);
});

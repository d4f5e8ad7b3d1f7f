// Keyed lanes (docs/design.md §11): every event reaches exactly one lane, by its key, in order per
// key; a type filter passes the other types; a parked key sets its events aside while the lane goes
// on; a change of the lane count loses nothing and keeps order per key.
import { randomBytes } from 'node:crypto';
import {
  appendEvents,
  capturingLogger,
  consumerRow,
  drainUntilIdle,
  freshSchema,
  gate,
  holdGap,
  recordingConsumer,
  type RecordingConsumer,
  until,
  untilWaitingForConsumerRow,
} from '@sluice/testing';
import { testDispatcher, useTestDatabase } from '@sluice/testing/vitest';
import { describe, expect, test } from 'vitest';
import type { Consumer } from '../consumers/consumer.js';
import type { EventRecord } from '../events.js';
import { requestLaneChange } from '../queries/lanes.js';
import { finishParkedReplay, recordParked } from '../queries/parked.js';
import { tables } from '../schema/tables.js';
import type { Queryable } from '../sql-types.js';
import { laneInstanceIds } from './lanes.js';

const db = await useTestDatabase();

const STREAMS = 12;
const byStream = (n: number) => ({
  streamId: `s-${n % STREAMS}`,
  type: n % 3 === 0 ? 'Paid' : 'Placed',
  data: { n },
});

/** Per stream, the delivered events' ids in delivery order. */
function perStream(seen: readonly EventRecord[]): Map<string, bigint[]> {
  const streams = new Map<string, bigint[]>();
  for (const e of seen) {
    const ids = streams.get(e.streamId);
    if (ids) ids.push(e.id);
    else streams.set(e.streamId, [e.id]);
  }
  return streams;
}

function expectOrderedPerStream(seen: readonly EventRecord[]): void {
  for (const [stream, ids] of perStream(seen)) {
    expect(
      [...ids].sort((a, b) => (a < b ? -1 : 1)),
      stream,
    ).toEqual(ids);
  }
}

async function rows(schema: string, name: string) {
  return db.sql<{ instance_id: string; cursor: string }[]>`
    select instance_id, cursor::text from ${db.sql(`${schema}.consumers`)}
    where name = ${name} order by instance_id`;
}

async function laned(consumers: readonly Consumer[], extra = {}) {
  const schema = await freshSchema(db.sql, 'lanes');
  const dispatcher = testDispatcher(db.sql, schema, consumers, extra);
  await dispatcher.ensureRegistered();
  return { schema, dispatcher };
}

describe('lanes', () => {
  test('a consumer of 4 lanes has 4 rows; each event reaches exactly one lane, in order per stream', async () => {
    const lanesSeen = new Map<bigint, string>();
    const c = recordingConsumer('fanout', {
      lanes: 4,
      handler: (event, ctx) => {
        lanesSeen.set(event.id, ctx.instanceId);
      },
    });
    const seen: EventRecord[] = [];
    const consumer: Consumer = {
      ...c.consumer,
      handler: (event, ctx) => {
        seen.push(event);
        lanesSeen.set(event.id, ctx.instanceId);
      },
    };
    const { schema, dispatcher } = await laned([consumer]);
    expect((await rows(schema, 'fanout')).map((r) => r.instance_id)).toEqual(laneInstanceIds(4).sort());

    await appendEvents(db.sql, 120, byStream, schema);
    await drainUntilIdle(dispatcher);

    expect(seen.map((e) => e.id).sort((a, b) => (a < b ? -1 : 1))).toEqual(
      Array.from({ length: 120 }, (_, i) => BigInt(i + 1)),
    );
    expectOrderedPerStream(seen);
    // A stream lives in one lane; the lanes share the streams out.
    const laneOfStream = new Map<string, Set<string>>();
    for (const e of seen) {
      const set = laneOfStream.get(e.streamId) ?? new Set<string>();
      set.add(lanesSeen.get(e.id) ?? '?');
      laneOfStream.set(e.streamId, set);
    }
    for (const [stream, lanes] of laneOfStream) expect(lanes.size, stream).toBe(1);
    expect(new Set([...laneOfStream.values()].map((s) => [...s][0])).size).toBeGreaterThan(1);
    // Every lane's cursor passed every event, its own or not.
    for (const row of await rows(schema, 'fanout')) expect(row.cursor).toBe('120');
  });

  test("a hole below another lane's events is a pending gap of every lane, and the late event reaches its own lane", async () => {
    const seen: EventRecord[] = [];
    const consumer: Consumer = {
      name: 'late',
      lanes: 3,
      handler: (event) => {
        seen.push(event);
      },
    };
    const { schema, dispatcher } = await laned([consumer]);
    const gap = await holdGap(db.sql, { streamId: 's-late', type: 'Late', data: {} }, { schema });
    await appendEvents(db.sql, 30, byStream, schema);
    await dispatcher.runOnce();
    for (const row of await rows(schema, 'late')) expect(row.cursor).toBe('31');
    for (const id of laneInstanceIds(3)) {
      expect((await consumerRow(db.sql, schema, 'late', id)).gapCount, id).toBe(1);
    }
    await gap.release({ commit: true });
    await drainUntilIdle(dispatcher);
    expect(seen.filter((e) => e.id === gap.id)).toHaveLength(1);
    expect(seen).toHaveLength(31);
  });

  test("a lane's turn hands its handler at most a batch of its own events, however many it reads", async () => {
    const one = recordingConsumer('one-key', { lanes: 4, batchSize: 10, maxBatchSize: 10 });
    const { schema, dispatcher } = await laned([one.consumer]);
    await appendEvents(db.sql, 100, () => ({ streamId: 'hot', type: 'T', data: {} }), schema);
    const first = await dispatcher.runOnce();
    expect(first.processed).toBe(10); // one turn per lane; only the hot key's lane has events
    await drainUntilIdle(dispatcher);
    expect(one.ids()).toEqual(Array.from({ length: 100 }, (_, i) => BigInt(i + 1)));
  });

  test('types: only the listed types reach the handler; the cursor passes the others', async () => {
    const paid = recordingConsumer('paid', { types: ['Paid'] });
    const { schema, dispatcher } = await laned([paid.consumer]);
    await appendEvents(db.sql, 30, byStream, schema);
    await drainUntilIdle(dispatcher);
    expect(paid.seen.every((e) => e.type === 'Paid')).toBe(true);
    // appendEvents numbers its events from 0: event n has id n + 1.
    expect(paid.ids()).toEqual(Array.from({ length: 10 }, (_, i) => BigInt(3 * i + 1)));
    expect((await consumerRow(db.sql, schema, 'paid')).cursor).toBe(30n);
  });
});

describe('parked keys', () => {
  function parkingConsumer(failing: Set<string>, lanes = 2): RecordingConsumer {
    return recordingConsumer('reactor', {
      lanes,
      errorPolicy: { maxAttempts: 2, parkKey: true },
      handler: (event) => {
        if (failing.has(event.streamId)) throw new Error(`cannot handle ${event.streamId}`);
        parked.push(event);
      },
    });
  }
  const parked: EventRecord[] = [];

  test('a key whose event uses up its attempts is parked with its later events; the other keys go on; a replay delivers them in order', async () => {
    parked.length = 0;
    const failing = new Set(['s-1']);
    const c = parkingConsumer(failing);
    const { schema, dispatcher } = await laned([c.consumer]);
    await appendEvents(db.sql, 48, byStream, schema);
    await drainUntilIdle(dispatcher);

    const s1 = Array.from({ length: 48 }, (_, i) => BigInt(i + 1)).filter((id) => (id - 1n) % 12n === 1n);
    expect(parked.filter((e) => e.streamId === 's-1')).toEqual([]);
    expect(parked).toHaveLength(48 - s1.length); // every other key went on
    expectOrderedPerStream(parked);
    const keys = await db.sql<{ key: string; first_event_id: string; attempts: number; error: string }[]>`
      select key, first_event_id::text, attempts, error from ${db.sql(`${schema}.parked_keys`)}`;
    expect(keys).toEqual([
      { key: 's-1', first_event_id: s1[0]?.toString(), attempts: 2, error: 'cannot handle s-1' },
    ]);
    const events = await db.sql<{ id: string }[]>`
      select event_id::text as id from ${db.sql(`${schema}.parked_events`)} order by event_id`;
    expect(events.map((e) => BigInt(e.id))).toEqual(s1);

    // Later events of the parked key are set aside too, in order.
    await appendEvents(db.sql, 12, (n) => byStream(n + 48), schema);
    await drainUntilIdle(dispatcher);
    const aside = await db.sql<
      { n: number }[]
    >`select count(*)::int as n from ${db.sql(`${schema}.parked_events`)}`;
    expect(aside[0]?.n).toBe(s1.length + 1);

    // Fixed: a replay delivers them in id order, and the key is no longer parked.
    failing.clear();
    await db.sql`update ${db.sql(`${schema}.parked_keys`)} set replay_requested_at = now()`;
    await drainUntilIdle(dispatcher);
    const replayed = parked.filter((e) => e.streamId === 's-1').map((e) => e.id);
    expect(replayed).toEqual([...s1, 50n]);
    expect(await db.sql`select 1 from ${db.sql(`${schema}.parked_keys`)}`).toHaveLength(0);
    expect(await db.sql`select 1 from ${db.sql(`${schema}.parked_events`)}`).toHaveLength(0);

    // The key is delivered normally again.
    await appendEvents(db.sql, 12, (n) => byStream(n + 60), schema);
    await drainUntilIdle(dispatcher);
    expect(parked.filter((e) => e.streamId === 's-1').map((e) => e.id)).toEqual([...s1, 50n, 62n]);
  });

  test('a start without parkKey while keys are parked is refused, changing nothing: their later events would go first', async () => {
    parked.length = 0;
    const c = parkingConsumer(new Set(['s-1']));
    const { schema, dispatcher } = await laned([c.consumer]);
    await appendEvents(db.sql, 24, byStream, schema);
    await drainUntilIdle(dispatcher);
    await dispatcher.stop();
    const before = await rows(schema, 'reactor');

    const unparking = testDispatcher(db.sql, schema, [
      { name: 'reactor', lanes: 2, handler: () => undefined },
    ]);
    const refused = await unparking.ensureRegistered().catch((e: unknown) => e);
    expect(refused).toMatchObject({
      code: 'SLUICE_INVALID_OPTION',
      option: 'consumers[0].errorPolicy.parkKey',
    });
    expect((refused as Error).message).toMatch(/consumer "reactor" has 1 parked key/);
    expect(await rows(schema, 'reactor')).toEqual(before);

    // Once the key is given up, the same start goes through.
    await db.sql`delete from ${db.sql(`${schema}.parked_keys`)}`;
    await testDispatcher(db.sql, schema, [
      { name: 'reactor', lanes: 2, handler: () => undefined },
    ]).ensureRegistered();
  });

  test.each([1, 2])(
    'a process without parkKey (a rolling deployment) sets aside the later events of a key another process parked; a replay delivers them in order (%i lanes)',
    async (lanes) => {
      parked.length = 0;
      const failing = new Set(['s-1']);
      const c = parkingConsumer(failing, lanes);
      const { schema, dispatcher: parking } = await laned([c.consumer]);
      // Started before any key was parked, so its start was not refused.
      const plain: EventRecord[] = [];
      const unparking = testDispatcher(db.sql, schema, [
        { name: 'reactor', lanes, handler: (event) => void plain.push(event) },
      ]);
      await unparking.ensureRegistered();
      await appendEvents(db.sql, 24, byStream, schema);
      await drainUntilIdle(parking);
      const parkedIds = async () =>
        (
          await db.sql<{ id: string }[]>`
          select event_id::text as id from ${db.sql(`${schema}.parked_events`)} order by event_id`
        ).map((e) => BigInt(e.id));
      expect(await parkedIds()).toEqual([2n, 14n]);

      // The process without parkKey turns the lanes now: the key's next event waits with the others.
      await appendEvents(db.sql, 12, (n) => byStream(n + 24), schema);
      await drainUntilIdle(unparking);
      expect(plain.map((e) => e.id).sort((a, b) => (a < b ? -1 : 1))).toEqual(
        Array.from({ length: 12 }, (_, i) => BigInt(i + 25)).filter((id) => id !== 26n),
      );
      expectOrderedPerStream(plain);
      expect(await parkedIds()).toEqual([2n, 14n, 26n]);
      const cursors = await rows(schema, 'reactor');
      expect(cursors.map((r) => r.cursor)).toEqual(Array.from({ length: lanes }, () => '36'));

      failing.clear();
      await db.sql`update ${db.sql(`${schema}.parked_keys`)} set replay_requested_at = now()`;
      await drainUntilIdle(parking);
      expect(parked.filter((e) => e.streamId === 's-1').map((e) => e.id)).toEqual([2n, 14n, 26n]);
      expect(await parkedIds()).toEqual([]);
    },
  );

  test("a per-instance consumer of the same name (another deployment's declaration) neither sets aside nor replays a shared consumer's parked key", async () => {
    const schema = await freshSchema(db.sql, 'lanes');
    let failing = true;
    const shared: bigint[] = [];
    const sharing = testDispatcher(db.sql, schema, [
      {
        name: 'reactor',
        errorPolicy: { maxAttempts: 1, parkKey: true },
        handler: (event) => {
          if (failing && event.streamId === 's-1') throw new Error('cannot handle s-1');
          shared.push(event.id);
        },
      },
    ]);
    const seen = { a: [] as bigint[], b: [] as bigint[] };
    const instance = (id: 'a' | 'b') =>
      testDispatcher(
        db.sql,
        schema,
        [{ name: 'reactor', delivery: 'per-instance', handler: (event) => void seen[id].push(event.id) }],
        { instanceId: id },
      );
    const a = instance('a');
    const b = instance('b');
    for (const d of [sharing, a, b]) await d.ensureRegistered();
    await appendEvents(db.sql, 6, (n) => ({ streamId: `s-${n % 2}`, type: 'Placed', data: { n } }), schema);
    await drainUntilIdle(sharing);
    await drainUntilIdle(b);
    expect(seen.b).toEqual([1n, 2n, 3n, 4n, 5n, 6n]);

    failing = false;
    await db.sql`update ${db.sql(`${schema}.parked_keys`)} set replay_requested_at = now()`;
    await drainUntilIdle(a);
    expect(seen.a).toEqual([1n, 2n, 3n, 4n, 5n, 6n]);
    await drainUntilIdle(sharing);
    expect(shared).toEqual([1n, 3n, 5n, 2n, 4n, 6n]);
    expect(await db.sql`select 1 from ${db.sql(`${schema}.parked_keys`)}`).toHaveLength(0);
  });

  test('a replay that fails again parks the key again from that event on, and delivers nothing twice', async () => {
    parked.length = 0;
    const failing = new Set(['s-1']);
    const c = parkingConsumer(failing);
    const { schema, dispatcher } = await laned([c.consumer]);
    await appendEvents(db.sql, 24, byStream, schema);
    await drainUntilIdle(dispatcher);
    await db.sql`update ${db.sql(`${schema}.parked_keys`)} set replay_requested_at = now()`;
    await drainUntilIdle(dispatcher);
    const keys = await db.sql<{ replay: boolean }[]>`
      select replay_requested_at is not null as replay from ${db.sql(`${schema}.parked_keys`)}`;
    expect(keys).toEqual([{ replay: false }]);
    expect(parked.filter((e) => e.streamId === 's-1')).toEqual([]);
    const events = await db.sql<
      { n: number }[]
    >`select count(*)::int as n from ${db.sql(`${schema}.parked_events`)}`;
    expect(events[0]?.n).toBe(2);
  });

  test('a replay that gets past the first parked events and fails on a later one parks the key from that one: first_event_id and error are its', async () => {
    const failingIds = new Set([2n]);
    const c = recordingConsumer('reactor', {
      errorPolicy: { maxAttempts: 1, parkKey: true },
      handler: (event) => {
        if (failingIds.has(event.id)) throw new Error(`cannot handle ${event.id}`);
      },
    });
    const { schema, dispatcher } = await laned([c.consumer]);
    // s-1 has events 2, 14, 26, 38: parked at 2, the others set aside.
    await appendEvents(db.sql, 40, byStream, schema);
    await drainUntilIdle(dispatcher);
    failingIds.clear();
    failingIds.add(26n);
    await db.sql`update ${db.sql(`${schema}.parked_keys`)} set replay_requested_at = now()`;
    await drainUntilIdle(dispatcher);
    const keys = await db.sql<{ first: string; error: string; requested: boolean }[]>`
      select first_event_id::text as first, error, replay_requested_at is not null as requested
      from ${db.sql(`${schema}.parked_keys`)}`;
    expect(keys).toEqual([{ first: '26', error: 'cannot handle 26', requested: false }]);
    const aside = await db.sql<{ id: string }[]>`
      select event_id::text as id from ${db.sql(`${schema}.parked_events`)} order by event_id`;
    expect(aside.map((e) => e.id)).toEqual(['26', '38']);
  });

  test('a key from a data field longer than 1000 bytes is not parked: the consumer stops on its event, saying why, and loses nothing', async () => {
    // 5,400 bytes that do not compress: more than an operator can name, and than the index can hold.
    const long = randomBytes(2_700).toString('hex');
    const handled: string[] = [];
    const c = recordingConsumer('by-field', {
      laneKey: { data: 'k' },
      errorPolicy: { maxAttempts: 1, parkKey: true },
      handler: (event) => {
        const key = (event.data as { k: string }).k;
        if (key !== 'short') throw new Error('cannot handle it');
        handled.push(key);
      },
    });
    const { schema, dispatcher } = await laned([c.consumer]);
    await appendEvents(
      db.sql,
      3,
      (n) => ({ streamId: 's', type: 'T', data: { k: n === 0 ? long : 'short' } }),
      schema,
    );
    await drainUntilIdle(dispatcher);
    expect(await consumerRow(db.sql, schema, 'by-field')).toMatchObject({
      status: 'dead',
      cursor: 0n,
      stuckEventId: 1n,
      lastError:
        'cannot handle it (its key (5400 bytes) is too long to park (at most 1000 bytes): the consumer stops on this event)',
    });
    expect(handled).toEqual([]);
    const keys = await db.sql`select 1 from ${db.sql(`${schema}.parked_keys`)}`;
    expect(keys).toHaveLength(0);
  });

  test('an event nested deeper than JSON.stringify can write parks its key with its payload intact; a replay delivers it', async () => {
    const failing = new Set(['Deep']);
    const handled: string[] = [];
    const c = recordingConsumer('deep', {
      lanes: 2,
      errorPolicy: { maxAttempts: 1, parkKey: true },
      handler: (event) => {
        if (failing.has(event.type)) throw new Error('cannot handle it');
        handled.push(`${event.streamId}:${event.id}`);
      },
    });
    const { schema, dispatcher } = await laned([c.consumer]);
    // 10,000 levels, written in SQL: PostgreSQL stores deeper jsonb than a call stack can serialise.
    await db.sql`
      insert into ${db.sql(`${schema}.events`)} (stream_id, type, data, metadata)
      values ('deep', 'Deep', ('{"a":' || repeat('[', 10000) || repeat(']', 10000) || '}')::jsonb,
              ('{"m":' || repeat('[', 10000) || repeat(']', 10000) || '}')::jsonb)`;
    // A later event of the parked key is set aside too; another key's goes on.
    await appendEvents(
      db.sql,
      2,
      (n) => ({ streamId: n === 0 ? 'deep' : 'other', type: 'T', data: { n } }),
      schema,
    );
    await drainUntilIdle(dispatcher);
    expect(handled).toEqual(['other:3']);
    const lanes = await db.sql<{ status: string; attempts: number }[]>`
      select status, attempts from ${db.sql(`${schema}.consumers`)} where name = 'deep'`;
    expect(lanes).toEqual([
      { status: 'idle', attempts: 0 },
      { status: 'idle', attempts: 0 },
    ]);
    // Compared in SQL: the payload as PostgreSQL holds it, never through JavaScript.
    const parked = await db.sql<{ key: string; id: string; data: boolean; metadata: boolean }[]>`
      select p.key, p.event_id::text as id, p.data::text = e.data::text as data,
             p.metadata::text = e.metadata::text as metadata
      from ${db.sql(`${schema}.parked_events`)} p join ${db.sql(`${schema}.events`)} e on e.id = p.event_id
      order by p.event_id`;
    expect(parked).toEqual([
      { key: 'deep', id: '1', data: true, metadata: true },
      { key: 'deep', id: '2', data: true, metadata: true },
    ]);

    failing.clear();
    await db.sql`update ${db.sql(`${schema}.parked_keys`)} set replay_requested_at = now()`;
    await drainUntilIdle(dispatcher);
    expect(handled).toEqual(['other:3', 'deep:1', 'deep:2']);
    expect(await db.sql`select 1 from ${db.sql(`${schema}.parked_keys`)}`).toHaveLength(0);
  });
});

test("a replay that ends while another lane's turn sets an event of the key aside (an old lane draining a change) leaves the key parked with that event", async () => {
  const schema = await freshSchema(db.sql, 'parked');
  const t = tables(db.sql, schema);
  const event = (id: bigint): EventRecord => ({
    id,
    streamId: 'K',
    type: 'T',
    data: {},
    metadata: {},
    createdAt: new Date(),
  });
  await db.sql.begin((tx) =>
    recordParked(tx, t, 'reactor', [{ event: event(1n), key: 'K', error: 'boom', attempts: 2 }]),
  );
  const pidOf = async (tx: Queryable) =>
    (await tx<{ pid: number }[]>`select pg_backend_pid() as pid`)[0]?.pid;
  // The old lane's turn has set event 6 aside and not committed yet.
  const commit = gate();
  let oldLane: number | undefined;
  const setAside = db.sql.begin(async (tx) => {
    await recordParked(tx, t, 'reactor', [{ event: event(6n), key: 'K', error: null, attempts: 0 }]);
    oldLane = await pidOf(tx);
    await commit.promise;
  });
  await until(() => oldLane !== undefined, 10_000, "the old lane's turn to set event 6 aside");
  // The new lane's replay delivered event 1 and ends: it waits for that turn, then counts.
  let replaying: number | undefined;
  const finished = db.sql.begin(async (tx) => {
    replaying = await pidOf(tx);
    return finishParkedReplay(tx, t, 'reactor', 'K', [1n], undefined);
  });
  await until(
    async () =>
      replaying !== undefined &&
      (await db.sql`select 1 from pg_stat_activity where pid = ${replaying} and wait_event_type = 'Lock'`)
        .length > 0,
    10_000,
    "the replay's end to wait for the old lane's turn",
  );
  commit.open();
  await setAside;
  expect(await finished).toBe(false); // not unparked: event 6 is parked under it
  const events = await db.sql<{ id: string }[]>`
    select event_id::text as id from ${db.sql(`${schema}.parked_events`)} where key = 'K'`;
  expect(events.map((e) => e.id)).toEqual(['6']);
  expect(await db.sql`select 1 from ${db.sql(`${schema}.parked_keys`)} where key = 'K'`).toHaveLength(1);
});

/** The keys recorded with a consumer's shared rows (null: none recorded). */
async function laneKeys(schema: string, name: string): Promise<(string | null)[]> {
  const found = await db.sql<{ lane_key: string | null }[]>`
    select distinct lane_key from ${db.sql(`${schema}.consumers`)} where name = ${name} order by 1`;
  return found.map((r) => r.lane_key);
}

describe('the lane key', () => {
  test('one lane: a process under another key than the one a newer start recorded parks no key: the event waits, saying why, and the consumer is not ended; restarted, it records its key and parks', async () => {
    const schema = await freshSchema(db.sql, 'lanekey');
    const oldSeen: bigint[] = [];
    const oldConsumer: Consumer = {
      name: 'reactor',
      errorPolicy: { maxAttempts: 1, parkKey: true },
      handler: (event) => {
        if (event.streamId === 's-1') throw new Error('cannot handle s-1');
        oldSeen.push(event.id);
      },
    };
    const oldProcess = testDispatcher(db.sql, schema, [oldConsumer]);
    await oldProcess.ensureRegistered();
    // A canary keys the consumer by a data field: one lane and nothing parked, its start records
    // its key. Then it is rolled back: the old processes keep the consumer going.
    await testDispatcher(db.sql, schema, [
      { name: 'reactor', laneKey: { data: 'n' }, errorPolicy: { parkKey: true }, handler: () => undefined },
    ]).ensureRegistered();
    expect(await laneKeys(schema, 'reactor')).toEqual(['data:n']);
    await appendEvents(db.sql, 12, byStream, schema);
    await oldProcess.runOnce();
    await oldProcess.runOnce();
    // Parked under the stream id, s-1 would mean nothing to the processes of the recorded key.
    expect(oldSeen).toEqual([1n]);
    expect(await db.sql`select 1 from ${db.sql(`${schema}.parked_keys`)}`).toHaveLength(0);
    const [row] = await db.sql<
      { cursor: string; status: string; attempts: number; last_error: string | null }[]
    >`
      select cursor::text, status, attempts, last_error from ${db.sql(`${schema}.consumers`)} where name = 'reactor'`;
    expect(row?.cursor).toBe('1');
    expect(row?.status).not.toBe('dead');
    expect(row?.attempts).toBeGreaterThanOrEqual(1);
    expect(row?.last_error).toMatch(
      /^cannot handle s-1 \(not parked: this process's laneKey is not the one recorded with the consumer's rows .* the event waits, retried, for a process that declares the recorded key/,
    );
    // Restarted (nothing is parked), the old process records its key, and parks s-1.
    const restarted = testDispatcher(db.sql, schema, [oldConsumer]);
    await restarted.ensureRegistered();
    expect(await laneKeys(schema, 'reactor')).toEqual(['streamId']);
    await until(
      async () => {
        await restarted.runOnce();
        return oldSeen.length === 11;
      },
      10_000,
      'the other keys delivered once s-1 is parked',
    );
    const aside = await db.sql<{ id: string }[]>`
      select event_id::text as id from ${db.sql(`${schema}.parked_events`)} order by event_id`;
    expect(aside.map((e) => e.id)).toEqual(['2']);
    expect(oldSeen).toEqual(Array.from({ length: 12 }, (_, i) => BigInt(i + 1)).filter((id) => id !== 2n));
  });

  test('one lane: while keys are parked, a process under another key than the recorded one leaves the row to the processes that declare it', async () => {
    const schema = await freshSchema(db.sql, 'lanekey');
    const keyed = (n: number) => ({ ...byStream(n), data: { n, t: `t-${n % 3}` } });
    const oldSeen: bigint[] = [];
    const newSeen: bigint[] = [];
    // A new deployment keys the consumer by a data field and does not park; an old process
    // restarts after it (one lane, nothing parked: its start records its key again).
    const newProcess = testDispatcher(db.sql, schema, [
      { name: 'reactor', laneKey: { data: 't' }, handler: (event) => void newSeen.push(event.id) },
    ]);
    await newProcess.ensureRegistered();
    const oldProcess = testDispatcher(db.sql, schema, [
      {
        name: 'reactor',
        errorPolicy: { maxAttempts: 1, parkKey: true },
        handler: (event) => {
          if (event.streamId === 's-1') throw new Error('cannot handle s-1');
          oldSeen.push(event.id);
        },
      },
    ]);
    await oldProcess.ensureRegistered();
    expect(await laneKeys(schema, 'reactor')).toEqual(['streamId']);

    // The old process parks s-1 (event 2). The new deployment now leaves the row to it: looking
    // parked keys up by its own key, it would deliver s-1's later events before the parked one.
    await appendEvents(db.sql, 12, keyed, schema);
    await drainUntilIdle(oldProcess);
    await appendEvents(db.sql, 12, (n) => keyed(n + 12), schema);
    await drainUntilIdle(newProcess);
    expect(newSeen).toEqual([]);
    await drainUntilIdle(oldProcess);
    const aside = await db.sql<{ id: string }[]>`
      select event_id::text as id from ${db.sql(`${schema}.parked_events`)} order by event_id`;
    expect(aside.map((e) => e.id)).toEqual(['2', '14']);
    expect(oldSeen).toEqual(
      Array.from({ length: 24 }, (_, i) => BigInt(i + 1)).filter((id) => id !== 2n && id !== 14n),
    );
  });

  test('one lane: a start under another key, behind a turn that parks a key under the old one, is refused once that turn commits', async () => {
    const schema = await freshSchema(db.sql, 'lanekey');
    const inHandler = gate();
    const release = gate();
    const oldProcess = testDispatcher(db.sql, schema, [
      {
        name: 'reactor',
        errorPolicy: { maxAttempts: 1, parkKey: true },
        handler: async () => {
          inHandler.open();
          await release.promise;
          throw new Error('cannot handle it');
        },
      },
    ]);
    await oldProcess.ensureRegistered();
    await appendEvents(db.sql, 1, byStream, schema);
    // The turn holds the row while its handler runs; nothing is parked yet when the start reads.
    const turn = oldProcess.runOnce();
    await inHandler.promise;
    const start = testDispatcher(db.sql, schema, [
      { name: 'reactor', laneKey: { data: 'n' }, errorPolicy: { parkKey: true }, handler: () => undefined },
    ])
      .ensureRegistered()
      .then(
        () => 'started',
        (error: unknown) => error,
      );
    await untilWaitingForConsumerRow(db.sql, 10_000, '%set lane_key%');
    release.open();
    await turn;
    expect(await db.sql`select key from ${db.sql(`${schema}.parked_keys`)}`).toEqual([{ key: 's-0' }]);
    // s-0 was parked under the stream id: under the data field it would mean nothing.
    expect(await start).toMatchObject({ code: 'SLUICE_INVALID_OPTION', option: 'consumers[0].laneKey' });
    expect(await laneKeys(schema, 'reactor')).toEqual(['streamId']);
  });

  test('a start that declares another key than the lanes were kept by is refused, and changes nothing', async () => {
    const seen: EventRecord[] = [];
    const handler = (event: EventRecord) => {
      seen.push(event);
    };
    const schema = await freshSchema(db.sql, 'lanekey');
    const byStreamId = testDispatcher(db.sql, schema, [{ name: 'proj', lanes: 2, handler }]);
    await byStreamId.ensureRegistered();
    await appendEvents(db.sql, 20, (n) => ({ ...byStream(n), data: { n, k: `k-${n % 5}` } }), schema);
    await byStreamId.runOnce();
    await byStreamId.stop();
    const before = await rows(schema, 'proj');
    expect(await laneKeys(schema, 'proj')).toEqual(['streamId']);

    const byField = testDispatcher(db.sql, schema, [
      recordingConsumer('other').consumer,
      { name: 'proj', lanes: 2, laneKey: { data: 'k' }, handler },
    ]);
    const refused = await byField.ensureRegistered().catch((e: unknown) => e);
    expect(refused).toMatchObject({ code: 'SLUICE_INVALID_OPTION', option: 'consumers[1].laneKey' });
    expect((refused as Error).message).toMatch(
      /is \{ data: "k" \}, but consumer "proj"'s lanes .* kept by 'streamId'/,
    );
    expect(await rows(schema, 'proj')).toEqual(before);
    // What the rows hold decides: going to one lane under another key is refused as well.
    await expect(
      testDispatcher(db.sql, schema, [
        { name: 'proj', lanes: 1, laneKey: { data: 'k' }, handler },
      ]).ensureRegistered(),
    ).rejects.toMatchObject({ code: 'SLUICE_INVALID_OPTION', option: 'consumers[0].laneKey' });
    expect(await rows(schema, 'proj')).toEqual(before);
    // The whole registration was refused: the other consumer was not registered either.
    expect(await db.sql`select 1 from ${db.sql(`${schema}.consumers`)} where name = 'other'`).toHaveLength(0);

    // One lane and no parked keys: nothing is kept by the key, which is recorded anew, also when
    // the lanes become several (the one lane drains to the barrier, the new ones start there).
    const single = testDispatcher(db.sql, schema, [{ name: 'single', handler }]);
    await single.ensureRegistered();
    await single.stop();
    await testDispatcher(db.sql, schema, [
      { name: 'single', lanes: 3, laneKey: { metadata: 'tenant' }, handler },
    ]).ensureRegistered();
    expect(await laneKeys(schema, 'single')).toEqual(['metadata:tenant']);
    // Rows from a release that recorded no key take the declared one.
    await db.sql`update ${db.sql(`${schema}.consumers`)} set lane_key = null where name = 'proj'`;
    await testDispatcher(db.sql, schema, [
      { name: 'proj', lanes: 2, laneKey: { data: 'k' }, handler },
    ]).ensureRegistered();
    expect(await laneKeys(schema, 'proj')).toEqual(['data:k']);
  });

  test('a process still running under the old key leaves the lanes another deployment keeps by its new key to that deployment: every event once', async () => {
    const delivered: { by: string; id: bigint }[] = [];
    const handlerOf = (by: string) => (event: EventRecord) => {
      delivered.push({ by, id: event.id });
    };
    const schema = await freshSchema(db.sql, 'lanekey');
    const logger = capturingLogger();
    // The old deployment: one lane, by stream id. The new one: 4 lanes by tenant, accepted (one
    // lane's cursor means the same under any key), which records its key and asks for 4 lanes.
    const old = testDispatcher(db.sql, schema, [{ name: 'proj', handler: handlerOf('old') }], { logger });
    await old.ensureRegistered();
    const fresh = testDispatcher(db.sql, schema, [
      { name: 'proj', lanes: 4, laneKey: { data: 'tenant' }, handler: handlerOf('new') },
    ]);
    await fresh.ensureRegistered();
    await drainUntilIdle(fresh);
    expect((await rows(schema, 'proj')).map((r) => r.instance_id)).toEqual(laneInstanceIds(4).sort());
    expect(await laneKeys(schema, 'proj')).toEqual(['data:tenant']);

    await appendEvents(
      db.sql,
      200,
      (n) => ({ streamId: `s-${n}`, type: 'Keyed', data: { tenant: `t-${n % 13}` } }),
      schema,
    );
    // Each deployment gets two lanes to turn (a session holds the other two): the old one would
    // split the log by stream id, the new one by tenant.
    const holding = async (lanes: string[], turn: () => Promise<unknown>) => {
      const locked = gate();
      const release = gate();
      const holder = db.sql.begin(async (tx) => {
        await tx`select 1 from ${tx(`${schema}.consumers`)} where name = 'proj' and instance_id in ${tx(lanes)} for update`;
        locked.open();
        await release.promise;
      });
      await locked.promise;
      try {
        for (let pass = 0; pass < 3; pass++) await turn();
      } finally {
        release.open();
        await holder;
      }
    };
    await holding(['*0/4', '*1/4'], () => old.runOnce());
    await holding(['*2/4', '*3/4'], () => fresh.runOnce());
    await drainUntilIdle(old);
    await drainUntilIdle(fresh);

    expect(delivered.filter((d) => d.by === 'old')).toEqual([]);
    expect(delivered.map((d) => d.id).sort((a, b) => (a < b ? -1 : 1))).toEqual(
      Array.from({ length: 200 }, (_, i) => BigInt(i + 1)),
    );
    const told = logger.lines.filter((l) =>
      l.message.startsWith("the consumer's lanes (or parked keys) are kept by another lane key"),
    );
    expect(told.map((l) => [l.level, l.fields['laneKey']])).toEqual([['warn', "'streamId'"]]);
  });
});

describe('changing the lane count', () => {
  test('4 lanes become 2 and then 3 under appends: every event once, in order per stream, the old rows gone', async () => {
    const seen: EventRecord[] = [];
    const handler = (event: EventRecord) => {
      seen.push(event);
    };
    const schema = await freshSchema(db.sql, 'relane');
    const four = testDispatcher(db.sql, schema, [{ name: 'proj', lanes: 4, handler }]);
    await four.ensureRegistered();
    await appendEvents(db.sql, 60, byStream, schema);
    await four.runOnce();
    await four.stop();

    // A deployment with 2 lanes: the 4 lanes go to a common barrier, then 2 new lanes go on.
    const two = testDispatcher(db.sql, schema, [{ name: 'proj', lanes: 2, handler }]);
    await two.ensureRegistered();
    const [change] = await db.sql<{ from_lanes: number; to_lanes: number }[]>`
      select from_lanes, to_lanes from ${db.sql(`${schema}.lane_changes`)}`;
    expect(change).toEqual({ from_lanes: 4, to_lanes: 2 });
    await appendEvents(db.sql, 60, (n) => byStream(n + 60), schema);
    await drainUntilIdle(two);
    expect((await rows(schema, 'proj')).map((r) => r.instance_id)).toEqual(laneInstanceIds(2).sort());
    expect(await db.sql`select 1 from ${db.sql(`${schema}.lane_changes`)}`).toHaveLength(0);
    await two.stop();

    const three = testDispatcher(db.sql, schema, [{ name: 'proj', lanes: 3, handler }]);
    await three.ensureRegistered();
    await appendEvents(db.sql, 60, (n) => byStream(n + 120), schema);
    await drainUntilIdle(three);
    expect((await rows(schema, 'proj')).map((r) => r.instance_id)).toEqual(laneInstanceIds(3).sort());
    expect(await laneKeys(schema, 'proj')).toEqual(['streamId']); // the new lanes keep the key

    expect(seen.map((e) => e.id).sort((a, b) => (a < b ? -1 : 1))).toEqual(
      Array.from({ length: 180 }, (_, i) => BigInt(i + 1)),
    );
    expectOrderedPerStream(seen);
    const audit = await db.sql<{ action: string }[]>`
      select action from ${db.sql(`${schema}.audit`)} where action like 'relane%' order by id`;
    expect(audit.map((a) => a.action)).toEqual(['relane', 'relane-switched', 'relane', 'relane-switched']);
  });

  test("an old lane's pending gap is resolved by the old lane after the switch; the new lanes go on meanwhile", async () => {
    const seen: EventRecord[] = [];
    const handler = (event: EventRecord) => {
      seen.push(event);
    };
    const schema = await freshSchema(db.sql, 'relane');
    const one = testDispatcher(db.sql, schema, [{ name: 'proj', handler }]);
    await one.ensureRegistered();
    const gap = await holdGap(db.sql, { streamId: 's-late', type: 'Late', data: {} }, { schema });
    await appendEvents(db.sql, 10, byStream, schema);
    await one.runOnce();
    await one.stop();

    const four = testDispatcher(db.sql, schema, [{ name: 'proj', lanes: 4, handler }]);
    await four.ensureRegistered();
    await appendEvents(db.sql, 20, (n) => byStream(n + 10), schema);
    for (let i = 0; i < 3; i++) await four.runOnce();
    // Switched: the new lanes delivered what came after the barrier; the old row waits on its gap.
    expect(seen).toHaveLength(30);
    expect((await rows(schema, 'proj')).map((r) => r.instance_id)).toEqual(
      ['*', ...laneInstanceIds(4)].sort(),
    );

    await gap.release({ commit: true });
    await drainUntilIdle(four);
    expect(seen.filter((e) => e.id === gap.id)).toHaveLength(1);
    expect((await rows(schema, 'proj')).map((r) => r.instance_id)).toEqual(laneInstanceIds(4).sort());
    expect(await db.sql`select 1 from ${db.sql(`${schema}.lane_changes`)}`).toHaveLength(0);
  });

  test('strict: a change asked for while the old lane waits at a hole switches, and the new lanes deliver the hole and what follows in order', async () => {
    const seen: EventRecord[] = [];
    const consumer = (lanes: number): Consumer => ({
      name: 'strict',
      lanes,
      ordering: 'strict',
      handler: (event) => {
        seen.push(event);
      },
    });
    const schema = await freshSchema(db.sql, 'relane');
    const one = testDispatcher(db.sql, schema, [consumer(1)]);
    await one.ensureRegistered();
    await appendEvents(db.sql, 1, byStream, schema);
    const gap = await holdGap(db.sql, { streamId: 's-late', type: 'Late', data: {} }, { schema });
    await appendEvents(db.sql, 5, (n) => byStream(n + 1), schema);
    await one.runOnce();
    await one.runOnce();
    await one.stop();
    // Strict: delivered up to the hole; the range above its cursor waits for the hole's writer.
    expect(seen.map((e) => e.id)).toEqual([1n]);

    const three = testDispatcher(db.sql, schema, [consumer(3)]);
    await three.ensureRegistered(); // asks for 1 -> 3 lanes: the barrier is the old lane's cursor, 1
    for (let i = 0; i < 3; i++) await three.runOnce();
    await gap.release({ commit: true });
    await drainUntilIdle(three);
    expect(seen.map((e) => e.id).sort((a, b) => (a < b ? -1 : 1))).toEqual(
      Array.from({ length: 7 }, (_, i) => BigInt(i + 1)),
    );
    expect(seen).toHaveLength(7);
    expectOrderedPerStream(seen);
    // Every new lane delivered its events in id order: strict holds within each lane.
    expect((await rows(schema, 'strict')).map((r) => r.instance_id)).toEqual(laneInstanceIds(3).sort());
    expect(await db.sql`select 1 from ${db.sql(`${schema}.lane_changes`)}`).toHaveLength(0);
  });

  test('a change asked for while the lanes stand at different cursors: the barrier is the highest, the others catch up to it, nothing twice', async () => {
    const seen: EventRecord[] = [];
    let laneOneFails = true;
    const consumer = (lanes: number): Consumer => ({
      name: 'proj',
      lanes,
      errorPolicy: { maxAttempts: 1_000 },
      handler: (event, ctx) => {
        if (laneOneFails && ctx.instanceId === '*1/2') throw new Error('lane 1 is not ready');
        seen.push(event);
      },
    });
    const schema = await freshSchema(db.sql, 'relane');
    const two = testDispatcher(db.sql, schema, [consumer(2)]);
    await two.ensureRegistered();
    await appendEvents(db.sql, 40, byStream, schema);
    await two.runOnce(); // lane 0 delivers up to 40; lane 1 stays at 0, failing
    await two.stop();
    expect(Object.fromEntries((await rows(schema, 'proj')).map((r) => [r.instance_id, r.cursor]))).toEqual({
      '*0/2': '40',
      '*1/2': '0',
    });

    laneOneFails = false;
    const four = testDispatcher(db.sql, schema, [consumer(4)]);
    await four.ensureRegistered();
    const [change] = await db.sql<
      { barrier: string }[]
    >`select barrier::text from ${db.sql(`${schema}.lane_changes`)}`;
    expect(change?.barrier).toBe('40');
    await appendEvents(db.sql, 40, (n) => byStream(n + 40), schema);
    await drainUntilIdle(four);
    const ids = seen.map((e) => e.id);
    expect(new Set(ids).size).toBe(ids.length); // nothing twice
    expect([...ids].sort((a, b) => (a < b ? -1 : 1))).toEqual(
      Array.from({ length: 80 }, (_, i) => BigInt(i + 1)),
    );
    expectOrderedPerStream(seen);
  });

  test.each([false, true])(
    'a change asked for while a lane at the barrier retries its next event (transactional: %s): the lane delivers it once it goes through, raises the barrier, and the change switches',
    async (transactional) => {
      const seen: EventRecord[] = [];
      let failing = true;
      const consumer = (lanes: number): Consumer => ({
        name: 'proj',
        lanes,
        transactional,
        errorPolicy: { maxAttempts: 1_000 },
        handler: (event) => {
          if (failing && event.id === 4n) throw new Error('not yet');
          seen.push(event);
        },
      });
      const schema = await freshSchema(db.sql, 'relane');
      const one = testDispatcher(db.sql, schema, [consumer(1)], { retryDelayMs: 1, retryMaxDelayMs: 1 });
      await one.ensureRegistered();
      await appendEvents(db.sql, 6, byStream, schema);
      await one.runOnce();
      await one.stop();
      // Not transactional, 1 to 3 are delivered; transactional, the batch is rolled back to 0.
      const [row] = await db.sql<{ cursor: string; attempts: number; stuck: string }[]>`
        select cursor::text, attempts, stuck_event_id::text as stuck from ${db.sql(`${schema}.consumers`)}`;
      expect(row).toMatchObject({ attempts: 1, stuck: '4' });

      const two = testDispatcher(db.sql, schema, [consumer(2)], { retryDelayMs: 1, retryMaxDelayMs: 1 });
      await two.ensureRegistered();
      const [change] = await db.sql<{ barrier: string }[]>`
        select barrier::text from ${db.sql(`${schema}.lane_changes`)}`;
      expect(change?.barrier).toBe(row?.cursor);
      // Still failing: the lane goes on retrying its event, above the barrier, and switches nothing.
      for (let i = 0; i < 3; i++) await two.runOnce();
      expect(
        await db.sql`select 1 from ${db.sql(`${schema}.lane_changes`)} where switched_at is null`,
      ).toHaveLength(1);
      const [retrying] = await db.sql<{ attempts: number }[]>`
        select attempts from ${db.sql(`${schema}.consumers`)}`;
      expect(retrying?.attempts).toBeGreaterThan(1);

      failing = false;
      await appendEvents(db.sql, 6, (n) => byStream(n + 6), schema);
      await until(
        async () => {
          await two.runOnce();
          return (
            (await db.sql`select 1 from ${db.sql(`${schema}.lane_changes`)}`).length === 0 &&
            seen.length >= 12
          );
        },
        20_000,
        'the change switched and drained, every event delivered',
      );
      await drainUntilIdle(two);
      await two.stop();
      expect((await rows(schema, 'proj')).map((r) => r.instance_id)).toEqual(laneInstanceIds(2).sort());
      // A transactional handler's calls in rolled-back attempts (1 to 3 with 4) count for nothing.
      const ids = seen.map((e) => e.id);
      expect([...new Set(ids)].sort((a, b) => (a < b ? -1 : 1))).toEqual(
        Array.from({ length: 12 }, (_, i) => BigInt(i + 1)),
      );
      if (!transactional) {
        expect(new Set(ids).size).toBe(ids.length); // nothing twice
        expectOrderedPerStream(seen);
      }
    },
  );

  /**
   * Two lanes at the barrier of a change to one lane, their turns overlapping for sure: an old
   * lane's turn holds its row from its start, writes it, then tries the switch in the same
   * transaction. The two turns' writes meet: each waits (at most 10 s) until the other turn has
   * written too, then the write of each lane in `sleeps` takes that many seconds. Returns after
   * one pass of both lanes' turns at once.
   *
   * The meeting is a rendezvous, not a hope (two turns started by one pass need not overlap on a
   * loaded machine: one's read can come after the other's commit). A write marks its lane's
   * arrival by a sequence's nextval, which no rollback or commit takes back, and waits until the
   * other lane's is marked: neither turn gets past its write before both are there.
   */
  async function overlappingSwitch(sleeps: Record<string, number>) {
    const seen: EventRecord[] = [];
    const handler = (event: EventRecord) => {
      seen.push(event);
    };
    const schema = await freshSchema(db.sql, 'relane');
    const two = testDispatcher(db.sql, schema, [{ name: 'proj', lanes: 2, handler }], { concurrency: 2 });
    await two.ensureRegistered();
    await appendEvents(db.sql, 20, byStream, schema);
    await drainUntilIdle(two);
    await requestLaneChange(db.sql, tables(db.sql, schema), schema, 'proj', 1, 'test');
    const sleep = Object.entries(sleeps).reduce(
      (otherwise, [lane, seconds]) =>
        `case when old.instance_id = '${lane}' then ${seconds} else ${otherwise} end`,
      '0',
    );
    const arrived = (lane: string) => `('"${schema}".arrived_' || ${lane})::regclass`;
    await db.sql.unsafe(`
      create sequence "${schema}".arrived_0;
      create sequence "${schema}".arrived_1;
      create function "${schema}".slow_lane_write() returns trigger language plpgsql as $$
      declare
        lane int := case old.instance_id when '*0/2' then 0 when '*1/2' then 1 end;
      begin
        if lane is null then return new; end if;
        perform nextval(${arrived('lane')});
        for i in 1..1000 loop
          exit when pg_sequence_last_value(${arrived('1 - lane')}) is not null;
          perform pg_sleep(0.01);
        end loop;
        perform pg_sleep(${sleep});
        return new;
      end $$;
      create trigger slow_lane_write before update on "${schema}".consumers
        for each row execute function "${schema}".slow_lane_write();`);
    const pass = await two.runOnce();
    const audit = await db.sql<{ action: string }[]>`
      select action from ${db.sql(`${schema}.audit`)} where action like 'relane%' order by id`;
    const left = (await rows(schema, 'proj')).map((r) => r.instance_id);
    await db.sql.unsafe(`drop trigger slow_lane_write on "${schema}".consumers`);
    await appendEvents(db.sql, 10, (n) => byStream(n + 20), schema);
    await drainUntilIdle(two);
    expect((await rows(schema, 'proj')).map((r) => r.instance_id)).toEqual(['*']);
    expect(seen.map((e) => e.id).sort((a, b) => (a < b ? -1 : 1))).toEqual(
      Array.from({ length: 30 }, (_, i) => BigInt(i + 1)),
    );
    return { pass, switches: audit.map((a) => a.action), left };
  }

  test('old lanes whose turns run at the same time switch in that pass: each may wait for the lanes after it, none for one before it', async () => {
    // Both hold their rows when each locks the other's: locking without waiting, both gave up,
    // pass after pass. Lane 1 tries while lane 0 holds its row, and gives up on it; lane 0 waits
    // for lane 1's turn to end, and switches.
    const { switches, left } = await overlappingSwitch({});
    expect(switches).toEqual(['relane', 'relane-switched']);
    expect(left).toEqual(['*', '*1/2']); // lane 0 switched and went; lane 1 goes at its next turn
  });

  test('an old lane waits for the lanes after it at most 0.5 s, then gives the switch up and goes on', async () => {
    // Lane 1's turn holds its row for 2 s: lane 0's wait runs out and its turn commits without a
    // failure; lane 1 then finds lane 0 free and switches. (The 1.5 s beyond lane 0's wait leave
    // its commit room on a loaded machine: with 0.8 s, lane 1 once still found it held.)
    const { pass, switches, left } = await overlappingSwitch({ '*1/2': 2 });
    expect(switches).toEqual(['relane', 'relane-switched']);
    expect(left).toEqual(['*', '*0/2']);
    expect(pass.byConsumer['proj']?.lanes?.['*0/2']).toMatchObject({ failed: 0, skipped: undefined });
  });

  test('an old lane at the barrier has nothing more to do until the switch: its turns do not go on and on', async () => {
    let laneOneFails = true;
    const schema = await freshSchema(db.sql, 'relane');
    const two = testDispatcher(db.sql, schema, [
      {
        name: 'proj',
        lanes: 2,
        errorPolicy: { maxAttempts: 1_000 },
        handler: (_event, ctx) => {
          if (laneOneFails && ctx.instanceId === '*1/2') throw new Error('lane 1 is not ready');
        },
      },
    ]);
    await two.ensureRegistered();
    await appendEvents(db.sql, 40, byStream, schema);
    await two.runOnce(); // lane 0 delivers up to 40; lane 1 stays behind, failing
    await requestLaneChange(db.sql, tables(db.sql, schema), schema, 'proj', 1, 'test');
    await appendEvents(db.sql, 10, (n) => byStream(n + 40), schema);

    // Lane 0 stands at the barrier (40) below the head (50): its turn has no more to do ('idle').
    // With more to do ('processing'), a started dispatcher turned it again and again until lane 1
    // came.
    await two.runOnce();
    const [laneZero] = await db.sql<{ cursor: string; status: string }[]>`
      select cursor::text, status from ${db.sql(`${schema}.consumers`)} where instance_id = '*0/2'`;
    expect(laneZero).toEqual({ cursor: '40', status: 'idle' });

    laneOneFails = false;
    await drainUntilIdle(two);
    expect((await rows(schema, 'proj')).map((r) => r.instance_id)).toEqual(['*']);
  });
});

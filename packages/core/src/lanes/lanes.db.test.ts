// Keyed lanes (docs/design.md §11): every event reaches exactly one lane, by its key, in order per
// key; a type filter passes the other types; a parked key sets its events aside while the lane goes
// on; a change of the lane count loses nothing and keeps order per key.
import { randomBytes } from 'node:crypto';
import {
  appendEvents,
  consumerRow,
  drainUntilIdle,
  freshSchema,
  gate,
  holdGap,
  recordingConsumer,
  type RecordingConsumer,
  until,
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
  function parkingConsumer(failing: Set<string>): RecordingConsumer {
    return recordingConsumer('reactor', {
      lanes: 2,
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

  /**
   * Two lanes at the barrier of a change to one lane, their turns widened: an old lane's turn
   * writes its row, then tries the switch in the same transaction, and the write of each lane in
   * `sleeps` takes that many seconds. Returns after one pass of both lanes' turns at once.
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
    const when = Object.entries(sleeps)
      .map(([lane, seconds]) => `when '${lane}' then ${seconds}`)
      .join(' ');
    await db.sql.unsafe(`
      create function "${schema}".slow_lane_write() returns trigger language plpgsql as $$
      begin
        perform pg_sleep(case old.instance_id ${when} else 0 end);
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
    // pass after pass. Lane 0 waits for lane 1, which gives up on lane 0.
    const { switches, left } = await overlappingSwitch({ '*0/2': 0.3, '*1/2': 0.3 });
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

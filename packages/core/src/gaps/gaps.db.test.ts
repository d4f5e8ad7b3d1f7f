// docs/design.md §5 against real PostgreSQL: late commits, burns, fences, the E1/E2 schedules of
// docs/reliability.md §3, LIMIT-cut fetches, huge ranges, carving, strict ordering.
import {
  appendEvents,
  consumerRow,
  freshSchema,
  openTransaction,
  type OpenTransaction,
  passUntil,
  recordingConsumer,
  until,
} from '@sluice/testing';
import { heldTransaction, registeredDispatcher, useTestDatabase } from '@sluice/testing/vitest';
import { describe, expect, onTestFinished, test } from 'vitest';
import type { EventRecord } from '../events.js';
import type { Sql } from '../sql-types.js';
import { rangesOf, spans, testDispatcher } from '../test-support.js';

const db = await useTestDatabase();
const PARK_LOCK = 737373;

const event = (n: number) => ({ streamId: `s-${n}`, type: 'GapTest', data: { n } });

/** Commits one event from its own transaction. */
async function commitOne(schema: string, n: number): Promise<EventRecord> {
  const [stored] = await appendEvents(db.sql, 1, () => event(n), schema);
  return stored as EventRecord;
}

/** Burns a few xids with autocommit writes, moving the cluster's xmax forward. */
async function burnXids(count = 3): Promise<void> {
  for (let i = 0; i < count; i++) await db.sql`select pg_current_xact_id()`;
}

/**
 * Makes inserts of sessions that `set sluice_test.park = 'on'` wait on an advisory lock inside the
 * created_at default: after their id is drawn, before the tx column's default and the row write.
 */
async function installParking(schema: string): Promise<void> {
  await db.sql.unsafe(`
    create function "${schema}".parked_now() returns timestamptz volatile language plpgsql as $$
    begin
      if current_setting('sluice_test.park', true) = 'on' then
        perform pg_advisory_xact_lock_shared(${PARK_LOCK});
      end if;
      return now();
    end $$;
    alter table "${schema}".events alter column created_at set default "${schema}".parked_now();`);
}

/**
 * nextval() takes an xid when it WAL-logs the sequence (the first call, then every 32nd). Draw one
 * id first so the reserver's nextval() is an ordinary one that leaves it without an xid.
 */
async function drawOneId(schema: string): Promise<void> {
  await db.sql`select nextval(${`${schema}.events_id_seq`}::regclass)`;
}

/** Starts an insert in `tx` that parks after drawing its id; resolves once it is parked. */
async function parkedAppend(schema: string, tx: OpenTransaction, n: number) {
  await tx.sql`select set_config('sluice_test.park', 'on', true)`;
  const inserting = tx.append([event(n)], { schema });
  inserting.catch(() => undefined);
  await until(
    async () => {
      const rows = await db.sql`
      select 1 from pg_stat_activity where pid = ${tx.pid} and wait_event_type = 'Lock' and wait_event = 'advisory'`;
      return rows.length > 0;
    },
    10_000,
    'the insert to park',
  );
  // Wrapped: returning the pending promise itself would make the caller await the parked insert.
  return { finished: inserting };
}

async function holdParkingLock(sql: Sql) {
  const holder = await sql.reserve();
  await holder`select pg_advisory_lock(${PARK_LOCK})`;
  let released = false;
  const release = async () => {
    if (released) return;
    released = true;
    await holder`select pg_advisory_unlock(${PARK_LOCK})`;
    holder.release();
  };
  onTestFinished(release);
  return release;
}

/** A consumer in a schema whose inserts can park (see installParking), with the parking lock held. */
async function parkingConsumer(name: string, options: { withoutXidTrigger?: boolean } = {}) {
  const schema = await freshSchema(db.sql);
  if (options.withoutXidTrigger) await db.sql.unsafe(`drop trigger events_assign_xid on "${schema}".events`);
  await installParking(schema);
  const c = recordingConsumer(name);
  const dispatcher = testDispatcher(db.sql, schema, [c.consumer]);
  await dispatcher.ensureRegistered();
  const unpark = await holdParkingLock(db.sql);
  return { schema, c, dispatcher, unpark };
}

/**
 * E1's schedule: id 1 drawn and never used, id 2 drawn by a reserver whose insert is parked before
 * its row is written (without the trigger, before it has an xid too), id 3 committed.
 */
async function e1Schedule(name: string, options: { withoutXidTrigger?: boolean } = {}) {
  const parking = await parkingConsumer(name, options);
  const reserver = await heldTransaction(db.sql);
  await drawOneId(parking.schema); // id 1, never used
  const parked = await parkedAppend(parking.schema, reserver, 2);
  const visible = await commitOne(parking.schema, 3);
  return { ...parking, reserver, parked, visible };
}

describe('gaps', () => {
  test('an event committed late below the cursor is delivered once it commits', async () => {
    const c = recordingConsumer('late');
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer]);
    const writer = await heldTransaction(db.sql);
    const [held] = await writer.append([event(1)], { schema });
    const visible = await commitOne(schema, 2);
    await dispatcher.runOnce();
    expect(c.ids()).toEqual([visible.id]);
    expect(spans(await rangesOf(db.sql, schema, 'late'))).toEqual([[held!.id, held!.id]]);
    await writer.commit();
    await passUntil(dispatcher, () => c.ids().length === 2, 'the late event');
    expect(c.ids()).toEqual([visible.id, held!.id]);
    expect(await rangesOf(db.sql, schema, 'late')).toEqual([]);
  });

  test('a rolled-back id is burnt only once pg_snapshot_xmin passes its fence; a held horizon keeps it', async () => {
    const c = recordingConsumer('burn');
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer]);
    // Holds the horizon: an xid older than any fence the dispatcher will take.
    const horizon = await heldTransaction(db.sql);
    const horizonXid = await horizon.xid();
    const writer = await openTransaction(db.sql);
    const writerXid = await writer.xid();
    const [doomed] = await writer.append([event(1)], { schema });
    await commitOne(schema, 2);

    await dispatcher.runOnce(); // observes the hole, unfenced
    expect((await rangesOf(db.sql, schema, 'burn'))[0]?.fence).toBeNull();
    await dispatcher.runOnce(); // fences it with this turn's xid
    const [fenced] = await rangesOf(db.sql, schema, 'burn');
    expect(fenced?.fence).not.toBeNull();
    // The fence was allocated after the observing snapshot: above every writer running then.
    expect(fenced!.fence! > writerXid).toBe(true);
    expect(fenced!.fence! > horizonXid).toBe(true);

    await writer.rollback();
    await burnXids();
    for (let i = 0; i < 3; i++) await dispatcher.runOnce();
    expect(spans(await rangesOf(db.sql, schema, 'burn'))).toEqual([[doomed!.id, doomed!.id]]);

    await horizon.rollback();
    await passUntil(
      dispatcher,
      async () => (await rangesOf(db.sql, schema, 'burn')).length === 0,
      'the burn',
    );
    expect(c.ids()).toEqual([doomed!.id + 1n]);
    expect((await consumerRow(db.sql, schema, 'burn')).gapCount).toBe(0);
  });

  test('E1, the reserver without an xid: with the xid-before-id trigger the late event is delivered', async () => {
    const { schema, c, dispatcher, unpark, reserver, parked, visible } = await e1Schedule('e1');

    await dispatcher.runOnce(); // sees 3, hole {1..2}
    await dispatcher.runOnce(); // fence
    await burnXids();
    for (let i = 0; i < 3; i++) await dispatcher.runOnce();
    expect(spans(await rangesOf(db.sql, schema, 'e1'))).toEqual([[1n, 2n]]);

    await unpark();
    await parked.finished;
    await reserver.commit();
    await passUntil(dispatcher, () => c.ids().length === 2, 'the reserved event');
    expect(c.ids()).toEqual([visible.id, 2n]);
  });

  test('E1 control: without the trigger the same schedule burns the id and loses the event', async () => {
    const { schema, c, dispatcher, unpark, reserver, parked, visible } = await e1Schedule('e1-control', {
      withoutXidTrigger: true,
    });

    await dispatcher.runOnce(); // hole {1..2}
    await dispatcher.runOnce(); // fenced by this turn's xid, while the reserver has none yet
    await unpark();
    await parked.finished; // the reserver only now takes its xid: above the fence
    await passUntil(
      dispatcher,
      async () => (await rangesOf(db.sql, schema, 'e1-control')).length === 0,
      'the burn',
    );
    await reserver.commit();
    for (let i = 0; i < 3; i++) await dispatcher.runOnce();
    const [committed] = await db.sql`select 1 from ${db.sql(`${schema}.events`)} where id = 2`;
    expect(committed).toBeDefined(); // event 2 exists…
    expect(c.ids()).toEqual([visible.id]); // …and was never delivered: lost.
  });

  test('E2, the reserver above the snapshot xmax: the late event is delivered', async () => {
    const { schema, c, dispatcher, unpark } = await parkingConsumer('e2');
    const older = await openTransaction(db.sql); // M: takes its xid first, writes later
    const unrelated = await openTransaction(db.sql); // A
    const reserver = await openTransaction(db.sql); // R
    onTestFinished(async () => {
      await older.rollback();
      await unrelated.rollback();
      await reserver.rollback();
    });
    await older.xid();
    await unrelated.xid();
    const reserverXid = await reserver.xid();
    const parked = await parkedAppend(schema, reserver, 1); // R holds id 1
    await older.append([event(2)], { schema }); // M appends id 2 …
    await older.commit(); // … and commits: latest completed xid is M's, below R's

    await dispatcher.runOnce(); // sees 2, hole {1}; R's xid is at or above this snapshot's xmax
    await dispatcher.runOnce(); // fence: this turn's xid, allocated after the observation
    const [fenced] = await rangesOf(db.sql, schema, 'e2');
    expect(fenced!.fence! > reserverXid).toBe(true);
    await unrelated.commit(); // A ends: xmin moves up to R, past the old snapshot's xmax
    for (let i = 0; i < 3; i++) await dispatcher.runOnce();
    expect(spans(await rangesOf(db.sql, schema, 'e2'))).toEqual([[1n, 1n]]);

    await unpark();
    await parked.finished;
    await reserver.commit();
    await passUntil(dispatcher, () => c.ids().length === 2, 'the reserved event');
    expect(c.ids()).toEqual([2n, 1n]);
  });

  test('a fetch cut short by batchSize burns nothing beyond its last id', async () => {
    const c = recordingConsumer('limit', { batchSize: 2 });
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer]);
    await appendEvents(db.sql, 2, event, schema); // 1, 2
    const writer = await heldTransaction(db.sql);
    await writer.append([3, 4, 5, 6, 7, 8].map(event), { schema }); // 3..8 in flight
    await commitOne(schema, 9);
    await dispatcher.runOnce(); // 1, 2
    await dispatcher.runOnce(); // 9; hole 3..8
    await dispatcher.runOnce(); // fence
    expect(spans(await rangesOf(db.sql, schema, 'limit'))).toEqual([[3n, 8n]]);
    await writer.commit();
    // Once the fence has passed, the re-fetch of 3..8 returns 3 and 4 (LIMIT 2): 5..8 were not
    // examined and must stay pending although the range is burnable.
    await passUntil(dispatcher, () => c.ids().includes(4n), 'the first re-fetch');
    expect(spans(await rangesOf(db.sql, schema, 'limit'))).toEqual([[5n, 8n]]);
    await passUntil(dispatcher, () => c.ids().length === 9, 'every event');
    expect(c.ids()).toEqual([1n, 2n, 9n, 3n, 4n, 5n, 6n, 7n, 8n]);
    expect(await rangesOf(db.sql, schema, 'limit')).toEqual([]);
  });

  test('a pruned stretch of 1,000,000 ids is one range, burnt in one go', async () => {
    const c = recordingConsumer('stretch');
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer]);
    await db.sql.unsafe(`alter sequence "${schema}".events_id_seq restart with 1000001`);
    const only = await commitOne(schema, 1);
    await dispatcher.runOnce();
    expect(c.ids()).toEqual([only.id]);
    expect(spans(await rangesOf(db.sql, schema, 'stretch'))).toEqual([[1n, 1_000_000n]]);
    expect((await consumerRow(db.sql, schema, 'stretch')).gapCount).toBe(1);
    await passUntil(
      dispatcher,
      async () => (await rangesOf(db.sql, schema, 'stretch')).length === 0,
      'the burn',
    );
  });

  test('delivered ids are carved out of their range, splitting it', async () => {
    const c = recordingConsumer('carve');
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer]);
    const writers = await Promise.all([1, 2, 3].map(() => openTransaction(db.sql)));
    onTestFinished(async () => {
      for (const w of writers) await w.rollback();
    });
    for (const [i, w] of writers.entries()) await w.append([event(i)], { schema }); // ids 1, 2, 3
    await commitOne(schema, 4);
    await dispatcher.runOnce();
    expect(spans(await rangesOf(db.sql, schema, 'carve'))).toEqual([[1n, 3n]]);
    await writers[1]!.commit(); // id 2
    await passUntil(dispatcher, () => c.ids().includes(2n), 'id 2');
    expect(spans(await rangesOf(db.sql, schema, 'carve'))).toEqual([
      [1n, 1n],
      [3n, 3n],
    ]);
  });

  test("ordering: 'strict' holds the cursor at the first unresolved gap", async () => {
    const c = recordingConsumer('strict', { ordering: 'strict' });
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer]);
    await appendEvents(db.sql, 2, event, schema); // 1, 2
    const writer = await heldTransaction(db.sql);
    await writer.append([event(3)], { schema }); // 3 in flight
    await appendEvents(db.sql, 2, event, schema); // 4, 5
    for (let i = 0; i < 3; i++) await dispatcher.runOnce();
    expect(c.ids()).toEqual([1n, 2n]);
    // Waiting at the hole is idle, not more to do: a turn that says so is turned again at once.
    expect(await consumerRow(db.sql, schema, 'strict')).toMatchObject({ cursor: 2n, status: 'idle' });
    await writer.commit();
    await passUntil(dispatcher, () => c.ids().length === 5, 'the rest in order');
    expect(c.ids()).toEqual([1n, 2n, 3n, 4n, 5n]);
  });

  test("a consumer restarted from 'fast' to 'strict' delivers a late event of a range fast ordering left behind its cursor", async () => {
    const fast = recordingConsumer('reordered');
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [fast.consumer]);
    await appendEvents(db.sql, 1, event, schema); // 1
    const writer = await heldTransaction(db.sql);
    const [held] = await writer.append([event(2)], { schema }); // 2 in flight
    await appendEvents(db.sql, 1, (n) => event(n + 2), schema); // 3
    await dispatcher.runOnce();
    await dispatcher.runOnce(); // the range is fenced
    expect(fast.ids()).toEqual([1n, 3n]);
    await dispatcher.stop();

    // The same consumer, now strict, while the writer of 2 is still open: its range lies behind the
    // cursor, where strict ordering keeps none. It was burnt as a hole strict ordering had passed.
    const strict = recordingConsumer('reordered', { ordering: 'strict' });
    const next = testDispatcher(db.sql, schema, [strict.consumer]);
    await next.ensureRegistered();
    for (let i = 0; i < 3; i++) await next.runOnce();
    expect(spans(await rangesOf(db.sql, schema, 'reordered'))).toEqual([[held!.id, held!.id]]);
    // Nor does the range hold the consumer up (the pre-check took it for the hole strict waits at).
    await appendEvents(db.sql, 1, (n) => event(n + 3), schema); // 4
    await passUntil(next, () => strict.ids().length === 1, 'the next event, the writer still open');
    expect(strict.ids()).toEqual([4n]);
    await writer.commit();
    await passUntil(next, () => strict.ids().length === 2, 'the late event');
    expect(strict.ids()).toEqual([4n, held!.id]);
    expect(await rangesOf(db.sql, schema, 'reordered')).toEqual([]);
  });

  test("a consumer restarted from 'strict' to 'fast' while strict waits at a hole delivers what follows, and the late event once it commits", async () => {
    const strict = recordingConsumer('unordered', { ordering: 'strict' });
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [strict.consumer]);
    await appendEvents(db.sql, 1, event, schema); // 1
    const writer = await heldTransaction(db.sql);
    const [held] = await writer.append([event(2)], { schema }); // 2 in flight
    await appendEvents(db.sql, 1, (n) => event(n + 2), schema); // 3
    for (let i = 0; i < 2; i++) await dispatcher.runOnce();
    expect(strict.ids()).toEqual([1n]);
    expect(spans(await rangesOf(db.sql, schema, 'unordered'))).toEqual([[held!.id, held!.id]]);
    await dispatcher.stop();

    // Fast ordering found the same hole again beside the one strict ordering kept ahead of the
    // cursor: the turn failed on the gaps' primary key, delivering 3 again at every try.
    const fast = recordingConsumer('unordered');
    const next = testDispatcher(db.sql, schema, [fast.consumer]);
    await next.ensureRegistered();
    await appendEvents(db.sql, 2, (n) => event(n + 3), schema); // 4, 5
    const pass = await next.runOnce();
    expect(pass.byConsumer['unordered']?.skipped).toBeUndefined();
    expect(fast.ids()).toEqual([3n, 4n, 5n]);
    expect(await consumerRow(db.sql, schema, 'unordered')).toMatchObject({ cursor: 5n, attempts: 0 });
    await writer.commit();
    await passUntil(next, () => fast.ids().length === 4, 'the late event');
    expect(fast.ids()).toEqual([3n, 4n, 5n, held!.id]);
    expect(await rangesOf(db.sql, schema, 'unordered')).toEqual([]);
  });

  test("ordering: 'strict' passes a rolled-back id once it is burnt", async () => {
    const c = recordingConsumer('strict-burn', { ordering: 'strict' });
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer]);
    const writer = await openTransaction(db.sql);
    await writer.append([event(1)], { schema });
    await appendEvents(db.sql, 2, event, schema); // 2, 3
    await dispatcher.runOnce();
    expect(c.ids()).toEqual([]);
    await writer.rollback();
    await passUntil(dispatcher, () => c.ids().length === 2, 'the events past the hole');
    expect(c.ids()).toEqual([2n, 3n]);
  });

  test("ordering: 'strict' at a fenced hole whose writer has ended has more to do (its next turn burns it), not idle", async () => {
    const c = recordingConsumer('strict-ended', { ordering: 'strict' });
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer]);
    const writer = await openTransaction(db.sql);
    await writer.append([event(1)], { schema });
    await writer.rollback(); // 1: never committed
    await appendEvents(db.sql, 1, event, schema); // 2
    await dispatcher.runOnce(); // observes the hole
    await dispatcher.runOnce(); // fences it; nothing below the fence runs
    // A started dispatcher turns it again at once (status processing), not at the next tick.
    expect(await consumerRow(db.sql, schema, 'strict-ended')).toMatchObject({
      cursor: 0n,
      status: 'processing',
    });
    await dispatcher.runOnce(); // burns it
    expect(c.ids()).toEqual([2n]);
  });

  test("ordering: 'strict' crosses every rolled-back hole of a fetch after one fence, not one hole per wait", async () => {
    const c = recordingConsumer('strict-many', { ordering: 'strict' });
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer]);
    for (let i = 0; i < 4; i++) {
      await commitOne(schema, i); // 1, 3, 5, 7
      const writer = await openTransaction(db.sql);
      await writer.append([event(100 + i)], { schema }); // 2, 4, 6, 8: rolled back
      await writer.rollback();
    }
    await commitOne(schema, 9); // 9
    // Turn 1 observes the four holes, turn 2 fences them with its xid, turn 3 burns them all.
    for (let turn = 0; turn < 3; turn++) await dispatcher.runOnce();
    expect(c.ids()).toEqual([1n, 3n, 5n, 7n, 9n]);
  });

  test('ranges and deliveries across the 9/10-digit boundary keep numeric order', async () => {
    const c = recordingConsumer('digits');
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer]);
    await db.sql.unsafe(`alter sequence "${schema}".events_id_seq restart with 999999997`);
    await commitOne(schema, 1); // 999999997
    const low = await openTransaction(db.sql);
    const high = await openTransaction(db.sql);
    onTestFinished(async () => {
      await low.rollback();
      await high.rollback();
    });
    await low.append([event(2)], { schema }); // 999999998
    await commitOne(schema, 3); // 999999999
    await high.append([event(4)], { schema }); // 1000000000
    await commitOne(schema, 5); // 1000000001
    await dispatcher.runOnce();
    expect(c.ids()).toEqual([999999997n, 999999999n, 1000000001n]);
    expect(spans(await rangesOf(db.sql, schema, 'digits'))).toEqual([
      [1n, 999999996n], // never drawn: the sequence was restarted
      [999999998n, 999999998n],
      [1000000000n, 1000000000n],
    ]);
    await high.commit();
    await low.commit();
    await passUntil(dispatcher, () => c.ids().length === 5, 'both late events');
    expect(c.ids().slice(3)).toEqual([999999998n, 1000000000n]);
    await passUntil(
      dispatcher,
      async () => (await rangesOf(db.sql, schema, 'digits')).length === 0,
      'the burn',
    );
  });
});

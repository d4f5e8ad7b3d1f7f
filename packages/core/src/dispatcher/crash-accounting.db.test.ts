// F6: a handler that kills the process never reaches its turn's COMMIT, so its attempt would roll
// back with the turn. The turn records its start in a committed statement first; a start that is
// still there at the next turn was a crash. These tests leave exactly what a crash leaves behind
// (turn_starts rows with started_count > 0) and check how the next turn counts them. The real
// kill -9 of a dispatcher process is exercised by the e2e suites.
import {
  appendEvents,
  consumerRow,
  drainUntilIdle,
  freshSchema,
  gate,
  recordingConsumer,
  until,
} from '@sluice/testing';
import { registeredDispatcher, useTestDatabase } from '@sluice/testing/vitest';
import { expect, test } from 'vitest';
import type { Consumer, HandlerContext } from '../consumers/consumer.js';
import type { EventRecord } from '../events.js';
import { testDispatcher } from '../test-support.js';

const db = await useTestDatabase();

async function leaveCrashedStarts(schema: string, name: string, first: bigint, last: bigint, count: number) {
  await db.sql`
    insert into ${db.sql(`${schema}.turn_starts`)} (consumer_name, instance_id, first_event_id, last_event_id, started_count)
    values (${name}, '*', ${first.toString()}::bigint, ${last.toString()}::bigint, ${count})`;
}

async function marker(schema: string) {
  const [row] = await db.sql<{ started_count: number; isolate_until: string | null }[]>`
    select started_count, isolate_until::text from ${db.sql(`${schema}.turn_starts`)}`;
  return row;
}

test('a delivering turn records its start and removes it when it commits, unless this process has a clean view of the consumer', async () => {
  const schema = await freshSchema(db.sql);
  const seen: number[] = [];
  let failOn: bigint | undefined;
  const c = recordingConsumer('mailer', {
    errorPolicy: { maxAttempts: 5 },
    handler: async (event: EventRecord) => {
      const row = await marker(schema);
      seen.push(row?.started_count ?? -1);
      if (event.id === failOn) throw new Error('once');
    },
  });
  const dispatcher = testDispatcher(db.sql, schema, [c.consumer]);
  await dispatcher.ensureRegistered();
  const turnWith = async (events: number) => {
    seen.length = 0;
    const appended = await appendEvents(db.sql, events, undefined, schema);
    await dispatcher.runOnce();
    return appended;
  };
  // The process's first turn: recorded (committed, visible while the handlers ran), gone with the commit.
  await turnWith(2);
  expect(seen).toEqual([1, 1]);
  expect(await marker(schema)).toBeUndefined();
  // The row is as this process's last turn left it: a crash now can only be this process dying,
  // and the next process's first turn records the start again. No record, no round trip.
  await turnWith(2);
  expect(seen).toEqual([-1, -1]);
  // Someone else wrote the row (an operator, another instance): recorded again.
  await db.sql`update ${db.sql(`${schema}.consumers`)} set updated_at = now() where name = 'mailer'`;
  await turnWith(1);
  expect(seen).toEqual([1]);
  await turnWith(1);
  expect(seen).toEqual([-1]);
  // A failed attempt: recorded until a turn commits without one.
  const [poison] = await turnWith(0).then(() => appendEvents(db.sql, 1, undefined, schema));
  failOn = poison!.id;
  seen.length = 0;
  await dispatcher.runOnce();
  expect(seen).toEqual([-1]); // the failing turn itself had a clean view
  failOn = undefined;
  seen.length = 0;
  await dispatcher.runOnce(); // the retry
  expect(seen).toEqual([1]);
  await turnWith(1);
  expect(seen).toEqual([-1]);
});

test("a transactional consumer's turns keep the clean view too: the row's xmin is its savepoint's, read back from the write", async () => {
  const schema = await freshSchema(db.sql);
  await db.sql`create table ${db.sql(`${schema}.projection`)} (event_id bigint primary key)`;
  const seen: number[] = [];
  const c = recordingConsumer('projection', {
    transactional: true,
    handler: async (event: EventRecord, context: HandlerContext) => {
      const tx = context.tx!;
      await tx`insert into ${tx(`${schema}.projection`)} values (${event.id.toString()})`;
      const row = await marker(schema);
      seen.push(row?.started_count ?? -1);
    },
  });
  const dispatcher = testDispatcher(db.sql, schema, [c.consumer]);
  await dispatcher.ensureRegistered();
  for (const expected of [
    [1, 1],
    [-1, -1],
    [-1, -1],
  ]) {
    seen.length = 0;
    await appendEvents(db.sql, 2, undefined, schema);
    await dispatcher.runOnce();
    // The first turn records its start; the ones after it follow this process's own commit.
    expect(seen).toEqual(expected);
  }
});

test('crashed starts count as attempts; the next turns deliver one event at a time through the crashed batch, the crashes moving on with them', async () => {
  const deliveries: { ids: bigint[]; attempt: number }[] = [];
  const c = recordingConsumer('mailer', {
    errorPolicy: { maxAttempts: 5 },
    handler: (event: EventRecord, context: HandlerContext) => {
      deliveries.push({ ids: [event.id], attempt: context.attempt });
    },
  });
  const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer]);
  await appendEvents(db.sql, 4, undefined, schema);
  await leaveCrashedStarts(schema, 'mailer', 1n, 3n, 2); // the process died twice delivering 1..3

  await dispatcher.runOnce();
  expect(deliveries).toEqual([{ ids: [1n], attempt: 3 }]); // alone, as its third attempt
  // Event 1 did not cause the two crashes: they move on with the isolation.
  expect(await marker(schema)).toEqual({ started_count: 2, isolate_until: '3' });
  await dispatcher.runOnce();
  await dispatcher.runOnce();
  expect(deliveries.slice(1)).toEqual([
    { ids: [2n], attempt: 3 },
    { ids: [3n], attempt: 3 },
  ]);
  expect(await marker(schema)).toBeUndefined(); // past the crashed batch: back to normal batches
  await dispatcher.runOnce();
  expect(c.ids()).toEqual([]); // (recordingConsumer's own list is bypassed by the custom handler)
  expect(deliveries.map((d) => d.ids[0])).toEqual([1n, 2n, 3n, 4n]);
  expect((await consumerRow(db.sql, schema, 'mailer')).attempts).toBe(0);
});

test('after maxAttempts crashed starts the consumer is dead without calling the handler again', async () => {
  let calls = 0;
  const c = recordingConsumer('mailer', {
    errorPolicy: { maxAttempts: 3 },
    handler: () => {
      calls += 1;
    },
  });
  const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer], {
    rearmCooldownMs: 3_600_000,
  });
  await appendEvents(db.sql, 2, undefined, schema);
  await leaveCrashedStarts(schema, 'mailer', 1n, 1n, 3);
  await dispatcher.runOnce();
  expect(calls).toBe(0);
  const row = await consumerRow(db.sql, schema, 'mailer');
  expect(row).toMatchObject({ status: 'dead', attempts: 3, stuckEventId: 1n, cursor: 0n });
  expect(row.lastError).toContain('stopped 3 time(s)');
});

test('with skipApplyErrors, the crash-poison event goes to dead_letters and the rest flows', async () => {
  const c = recordingConsumer('mailer', { errorPolicy: { maxAttempts: 2, skipApplyErrors: true } });
  const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer]);
  await appendEvents(db.sql, 3, undefined, schema);
  await leaveCrashedStarts(schema, 'mailer', 1n, 1n, 2);
  for (let i = 0; i < 3; i++) await dispatcher.runOnce();
  expect(c.ids()).toEqual([2n, 3n]);
  const letters = await db.sql<
    { event_id: string }[]
  >`select event_id::text from ${db.sql(`${schema}.dead_letters`)}`;
  expect(letters.map((l) => l.event_id)).toEqual(['1']);
});

test('the crashes a crash-poison event was ended on were its own: the next event of the crashed batch starts from none', async () => {
  const attempts = new Map<bigint, number>();
  const c = recordingConsumer('mailer', {
    errorPolicy: { maxAttempts: 2, skipApplyErrors: true },
    handler: (event: EventRecord, context: HandlerContext) => {
      attempts.set(event.id, context.attempt);
    },
  });
  const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer]);
  await appendEvents(db.sql, 3, undefined, schema);
  await leaveCrashedStarts(schema, 'mailer', 1n, 3n, 2); // the process died twice delivering 1..3
  await dispatcher.runOnce(); // event 1 is charged both crashes: dead letter, no call
  expect(await marker(schema)).toEqual({ started_count: 0, isolate_until: '3' });
  for (let i = 0; i < 3; i++) await dispatcher.runOnce();
  expect([...attempts]).toEqual([
    [2n, 1],
    [3n, 1],
  ]);
  const letters = await db.sql<
    { event_id: string }[]
  >`select event_id::text from ${db.sql(`${schema}.dead_letters`)}`;
  expect(letters.map((l) => l.event_id)).toEqual(['1']);
});

test('a turn that fails before it records its start leaves the crashes recorded before it as they are', async () => {
  const attempts: number[] = [];
  const c = recordingConsumer('mailer', {
    errorPolicy: { maxAttempts: 5 },
    handler: (_event: EventRecord, context: HandlerContext) => {
      attempts.push(context.attempt);
    },
  });
  const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer], { backoffInitialMs: 1 });
  await appendEvents(db.sql, 1, undefined, schema);
  await leaveCrashedStarts(schema, 'mailer', 1n, 1n, 2); // the process died twice on event 1
  // The turn's fetch fails (its table is away for a moment): an infrastructure failure in a process
  // that survives it, before this turn recorded any start.
  await db.sql`alter table ${db.sql(`${schema}.events`)} rename to events_away`;
  const failed = await dispatcher.runOnce();
  await db.sql`alter table ${db.sql(`${schema}.events_away`)} rename to events`;
  expect(failed.byConsumer['mailer']?.skipped).toBe('failed');
  expect(await marker(schema)).toMatchObject({ started_count: 2 }); // both crashes still count
  await until(
    async () => ((await dispatcher.runOnce()).byConsumer['mailer']?.processed ?? 0) === 1,
    5_000,
    'the turn after the backoff',
  );
  expect(attempts).toEqual([3]);
});

test('a replay is one attempt: its request is cleared, committed, before its handler runs (a process that dies there does not replay it at every start); a turn that fails while the process lives asks for it again', async () => {
  const schema = await freshSchema(db.sql);
  const letters = db.sql(`${schema}.dead_letters`);
  const letterRow = async () =>
    (
      await db.sql<{ requested: boolean; replayed: boolean; error: string | null }[]>`
        select replay_requested_at is not null as requested, replayed_at is not null as replayed, error
        from ${letters}`
    )[0];
  let mode: 'fail' | 'hang' | 'observe' = 'fail';
  let calls = 0;
  let pid = 0;
  let seenDuringReplay: Awaited<ReturnType<typeof letterRow>>;
  const proceed = gate();
  const c = recordingConsumer('dl', {
    transactional: true,
    errorPolicy: { maxAttempts: 1, skipApplyErrors: true },
    handler: async (event, ctx) => {
      if (event.id !== 1n) return;
      calls += 1;
      if (mode === 'fail') throw new Error('cannot handle it');
      if (mode === 'hang') {
        const [row] = await ctx.tx!<{ pid: number }[]>`select pg_backend_pid() as pid`;
        pid = row!.pid;
        await proceed.promise;
      }
      // What a process that died here would leave: read on another connection.
      if (mode === 'observe') seenDuringReplay = await letterRow();
    },
  });
  const dispatcher = testDispatcher(db.sql, schema, [c.consumer], { backoffInitialMs: 10, backoffMaxMs: 10 });
  await dispatcher.ensureRegistered();
  await appendEvents(db.sql, 2, undefined, schema);
  await dispatcher.runOnce(); // event 1 to the dead letters, event 2 delivered
  await db.sql`update ${letters} set replay_requested_at = now()`;

  // The replay's turn dies with its connection while its handler runs; this process lives on.
  mode = 'hang';
  calls = 0;
  const pass = dispatcher.runOnce();
  await until(() => pid !== 0, 10_000, 'the replay in its handler');
  await db.sql`select pg_terminate_backend(${pid})`;
  proceed.open();
  await pass;
  expect(await letterRow()).toEqual({ requested: true, replayed: false, error: 'cannot handle it' });

  // Replayed again by a later turn. While its handler runs, the request is already cleared, and
  // the dead letter says the replay did not finish: what a crash at that moment leaves behind.
  mode = 'observe';
  await until(
    async () => {
      await dispatcher.runOnce();
      return (await letterRow())?.replayed === true;
    },
    10_000,
    'the replay',
  );
  expect(calls).toBe(2);
  expect(seenDuringReplay).toMatchObject({ requested: false, replayed: false });
  expect(seenDuringReplay?.error).toMatch(
    /^the replay did not finish \(the process stopped.*\): cannot handle it$/,
  );
  expect(await letterRow()).toEqual({ requested: false, replayed: true, error: 'cannot handle it' });
});

/**
 * A rolling deployment's 'reactor': `other` (declared without parkKey, registered first) beside a
 * process that parks s-1 at event 2 (events 1–6: s-0 odd ids, s-1 even). Then events 7 (s-1), 8 (s-0)
 * and 9 (s-1), and what a turn of `other` over 7..9 leaves when it set 7 aside and its process died
 * in 8's handler: one crash recorded. Returns the parking process's handled ids and a switch that
 * lets it handle s-1 (for a replay).
 */
async function crashedBesideParkedKey(schema: string, other: Consumer) {
  let failing = true;
  const handled: bigint[] = [];
  const parking = testDispatcher(db.sql, schema, [
    {
      name: 'reactor',
      errorPolicy: { maxAttempts: 1, parkKey: true },
      handler: (event) => {
        if (failing && event.streamId === 's-1') throw new Error('cannot handle s-1');
        handled.push(event.id);
      },
    },
  ]);
  const plain = testDispatcher(db.sql, schema, [other]);
  await plain.ensureRegistered();
  await parking.ensureRegistered();
  await appendEvents(db.sql, 6, (n) => ({ streamId: `s-${n % 2}`, type: 'Placed', data: { n } }), schema);
  await drainUntilIdle(parking); // s-1 parked at 2; 4 and 6 set aside
  await appendEvents(
    db.sql,
    3,
    (n) => ({ streamId: `s-${(n + 1) % 2}`, type: 'Placed', data: { n } }),
    schema,
  );
  await leaveCrashedStarts(schema, 'reactor', 7n, 9n, 1);
  return {
    parking,
    plain,
    handled,
    fix: () => {
      failing = false;
    },
  };
}

async function parkedEventIds(schema: string): Promise<string[]> {
  const aside = await db.sql<{ id: string }[]>`
    select event_id::text as id from ${db.sql(`${schema}.parked_events`)} order by event_id`;
  return aside.map((e) => e.id);
}

test("a crash charged to an event of a parked key (a turn set it aside, then died in a later event's handler) sets it aside, and the crash travels on to the next event: the key's order kept", async () => {
  const schema = await freshSchema(db.sql);
  const seen: bigint[] = [];
  const { parking, plain, handled, fix } = await crashedBesideParkedKey(schema, {
    name: 'reactor',
    errorPolicy: { maxAttempts: 1, skipApplyErrors: true },
    handler: (event) => void seen.push(event.id),
  });
  await drainUntilIdle(plain);

  // The crash was 8's: with maxAttempts 1 it goes to the dead letters without another call.
  const dead = await db.sql<{ id: string; error: string }[]>`
    select event_id::text as id, error from ${db.sql(`${schema}.dead_letters`)} order by event_id`;
  expect(dead).toEqual([{ id: '8', error: 'the process stopped 1 time(s) while event 8 was being handled' }]);
  expect(await parkedEventIds(schema)).toEqual(['2', '4', '6', '7', '9']);
  expect(seen).toEqual([]);
  fix();
  await db.sql`update ${db.sql(`${schema}.parked_keys`)} set replay_requested_at = now()`;
  await drainUntilIdle(parking);
  expect(handled).toEqual([1n, 3n, 5n, 2n, 4n, 6n, 7n, 9n]);
});

test('an event of a parked key set aside while a crashed batch is isolated takes no crash off: the crashes travel on to the next event', async () => {
  const schema = await freshSchema(db.sql);
  // Counted against event 8 when its handler runs: the crash of the batch 7..9, and its own start.
  const countedAt8: number[] = [];
  const { plain } = await crashedBesideParkedKey(schema, {
    name: 'reactor',
    errorPolicy: { maxAttempts: 3, skipApplyErrors: true },
    handler: async (event) => {
      if (event.id === 8n) countedAt8.push((await marker(schema))?.started_count ?? -1);
    },
  });
  await drainUntilIdle(plain);
  expect(countedAt8).toEqual([2]);
  expect(await parkedEventIds(schema)).toEqual(['2', '4', '6', '7', '9']);
});

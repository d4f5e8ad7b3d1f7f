// docs/design.md §4.3: a turn holds the cluster's horizon while its handlers run, so it is bounded in time
// (maxTurnMs) as well as in events, and every handler call is bounded (handlerTimeoutMs).
import {
  appendEvents,
  consumerRow,
  drainUntilIdle,
  freshSchema,
  gate,
  recordingConsumer,
  until,
  type ConsumerRow,
} from '@sluice/testing';
import { registeredDispatcher, useTestDatabase } from '@sluice/testing/vitest';
import { createServer, connect, type AddressInfo, type Socket } from 'node:net';
import postgres from 'postgres';
import { expect, onTestFinished, test } from 'vitest';
import type { Consumer } from '../consumers/consumer.js';
import type { EventRecord } from '../events.js';
import type { DispatcherOptions } from '../options.js';
import { recordInfraFailure } from '../queries/consumers.js';
import { tables } from '../schema/tables.js';
import type { Sql } from '../sql-types.js';
import { settleWithin, TIMED_OUT } from '../time-limit.js';
import { testDispatcher } from '../test-support.js';

const db = await useTestDatabase();

/**
 * The transactional consumers' handlerTimeoutMs here. It bounds the whole call, its savepoint's
 * round trips included: at 100 ms, a loaded CI machine timed out a call that hangs on nothing.
 */
const TRANSACTIONAL_TIMEOUT_MS = 500;

test('maxTurnMs: a turn commits what it has done when its time is up, and the next turn continues', async () => {
  const schema = await freshSchema(db.sql);
  const c = recordingConsumer('slowpoke', {
    handler: async (event) => {
      await new Promise((resolve) => setTimeout(resolve, 30));
      c.seen.push(event);
    },
  });
  const dispatcher = testDispatcher(db.sql, schema, [c.consumer], { maxTurnMs: 50 });
  await dispatcher.ensureRegistered();
  await appendEvents(db.sql, 10, undefined, schema);
  const first = await dispatcher.runOnce();
  expect(first.processed).toBeGreaterThanOrEqual(1);
  expect(first.processed).toBeLessThan(10);
  expect((await consumerRow(db.sql, schema, 'slowpoke')).cursor).toBe(BigInt(first.processed));
  await drainUntilIdle(dispatcher);
  expect(c.ids()).toEqual(Array.from({ length: 10 }, (_, i) => BigInt(i + 1)));
});

test('a turn of handler calls that send no statement outlasts handlerTimeoutMs + statementTimeoutMs, and commits', async () => {
  // Each call is well within its time, and the turn within maxTurnMs; together the calls keep the
  // turn's transaction idle for longer than one call and one statement may take.
  const c = recordingConsumer('steady', {
    handler: async (event) => {
      await new Promise((resolve) => setTimeout(resolve, 120));
      c.seen.push(event);
    },
  });
  const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer], {
    handlerTimeoutMs: 250,
    statementTimeoutMs: 250,
    maxTurnMs: 5_000,
  });
  await appendEvents(db.sql, 6, undefined, schema);
  expect((await dispatcher.runOnce()).processed).toBe(6);
  expect(await consumerRow(db.sql, schema, 'steady')).toMatchObject({ cursor: 6n, status: 'idle' });
  expect(c.ids()).toEqual([1n, 2n, 3n, 4n, 5n, 6n]);
});

test('a consumer far behind gives its slot to the consumers waiting for one after each turn', async () => {
  const order: string[] = [];
  const consumer = (name: string) =>
    recordingConsumer(name, {
      handler: (event) => {
        order.push(`${name}:${event.id}`);
      },
    });
  const [a, b] = [consumer('a'), consumer('b')];
  const schema = await freshSchema(db.sql);
  await appendEvents(db.sql, 40, undefined, schema);
  const dispatcher = testDispatcher(db.sql, schema, [a.consumer, b.consumer], {
    concurrency: 1,
    batchSize: 5,
    maxBatchSize: 5,
    pollIntervalMs: 20,
  });
  await dispatcher.start();
  await until(
    () => order.length === 80,
    10_000,
    () => `80 deliveries, got ${order.length}`,
  );
  // One slot: the two take turns of a batch each, rather than one catching up before the other starts.
  const firstOfB = order.indexOf('b:1');
  const lastOfA = order.indexOf('a:40');
  expect(firstOfB).toBeLessThan(lastOfA);
  expect(firstOfB).toBeLessThanOrEqual(5);
  const runs =
    order
      .map((o) => o.slice(0, 1))
      .join('')
      .match(/(.)\1*/g) ?? [];
  expect(Math.max(...runs.map((r) => r.length))).toBe(5);
});

test('stop() lets the running handler call finish, hands no further event to it, and commits what was done', async () => {
  const third = gate();
  const c = recordingConsumer('stopping', {
    handler: async (event) => {
      c.seen.push(event);
      if (c.seen.length === 3) await third.promise;
    },
  });
  const schema = await freshSchema(db.sql);
  await appendEvents(db.sql, 20, undefined, schema);
  const dispatcher = testDispatcher(db.sql, schema, [c.consumer], { maxTurnMs: 60_000, pollIntervalMs: 20 });
  await dispatcher.start();
  await until(() => c.seen.length === 3, 10_000, 'the third call');
  const stopped = dispatcher.stop();
  third.open();
  await stopped;
  expect(c.ids()).toEqual([1n, 2n, 3n]);
  expect((await consumerRow(db.sql, schema, 'stopping')).cursor).toBe(3n);
});

test('a handler that calls stop() is handed no further event, by the running turn or any other', async () => {
  let stopped: Promise<void> | undefined;
  const c = recordingConsumer('self-stopping', {
    handler: (event) => {
      c.seen.push(event);
      if (c.seen.length === 3) stopped = dispatcher.stop();
    },
  });
  const schema = await freshSchema(db.sql);
  await appendEvents(db.sql, 20, undefined, schema);
  const dispatcher = testDispatcher(db.sql, schema, [c.consumer], { maxTurnMs: 60_000, pollIntervalMs: 20 });
  await dispatcher.start();
  await until(() => stopped !== undefined, 10_000, 'the third call');
  await stopped;
  expect(c.ids()).toEqual([1n, 2n, 3n]);
  expect((await consumerRow(db.sql, schema, 'self-stopping')).cursor).toBe(3n);
});

test('after stop(), a turn that was waiting for a slot does not begin: no other consumer is handed an event', async () => {
  let stopped: Promise<void> | undefined;
  const handed: string[] = [];
  const first = recordingConsumer('first', {
    handler: () => {
      handed.push('first');
      stopped ??= dispatcher.stop();
    },
  });
  const second = recordingConsumer('second', {
    handler: () => {
      handed.push('second');
    },
  });
  const schema = await freshSchema(db.sql);
  await appendEvents(db.sql, 5, undefined, schema);
  // One slot: the second consumer's turn waits for the first one's.
  const dispatcher = testDispatcher(db.sql, schema, [first.consumer, second.consumer], {
    concurrency: 1,
    pollIntervalMs: 20,
  });
  await dispatcher.start();
  await until(() => stopped !== undefined, 10_000, 'the stop');
  await stopped;
  expect(handed).toEqual(['first']);
});

/** A TCP proxy to `target` that can go silent: forwards nothing more either way, closes nothing. */
async function silencingProxy(target: URL) {
  const sockets = new Set<Socket>();
  let silent = false;
  const server = createServer((client) => {
    const upstream = connect(Number(target.port || 5432), target.hostname);
    sockets.add(client).add(upstream);
    client.on('data', (data) => silent || upstream.write(data));
    upstream.on('data', (data) => silent || client.write(data));
    const close = () => {
      client.destroy();
      upstream.destroy();
    };
    for (const socket of [client, upstream]) socket.on('close', close).on('error', close);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  onTestFinished(() => {
    for (const socket of sockets) socket.destroy();
    server.close();
  });
  return {
    url: Object.assign(new URL(target), {
      hostname: '127.0.0.1',
      port: String((server.address() as AddressInfo).port),
    }).href,
    silence: () => {
      silent = true;
    },
  };
}

test("stop() returns when a turn's statement never gets an answer (a pooler queueing it while the server is down)", async () => {
  const schema = await freshSchema(db.sql);
  const proxy = await silencingProxy(new URL(db.url));
  const sql = postgres(proxy.url, { max: 4, onnotice: () => undefined }) as unknown as Sql;
  onTestFinished(() => sql.end({ timeout: 0 }));
  let called = false;
  const c = recordingConsumer('silenced', {
    handler: () => {
      called = true;
      proxy.silence(); // the turn's writes and COMMIT go out and never come back
    },
  });
  await appendEvents(db.sql, 1, undefined, schema);
  const dispatcher = testDispatcher(sql, schema, [c.consumer], {
    handlerTimeoutMs: 300,
    statementTimeoutMs: 300,
    pollIntervalMs: 20,
  });
  await dispatcher.start();
  await until(() => called, 10_000, 'the handler call');
  expect(await settleWithin(dispatcher.stop(), 20_000)).not.toBe(TIMED_OUT);
  // Nothing of the turn committed: the event is delivered again by the next dispatcher.
  expect((await consumerRow(db.sql, schema, 'silenced')).cursor).toBe(0n);
});

test('handlerTimeoutMs: a handler that never settles counts as a failed attempt and the turn ends', async () => {
  const signals: AbortSignal[] = [];
  const c = recordingConsumer('hung', {
    handlerTimeoutMs: 100,
    errorPolicy: { maxAttempts: 2 },
    handler: (_event, ctx) => {
      signals.push(ctx.signal);
      return new Promise(() => undefined); // never settles
    },
  });
  const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer], {
    rearmCooldownMs: 3_600_000,
  });
  await appendEvents(db.sql, 2, undefined, schema);
  await dispatcher.runOnce();
  const row = await consumerRow(db.sql, schema, 'hung');
  expect(row).toMatchObject({ cursor: 0n, attempts: 1, stuckEventId: 1n });
  expect(row.lastError).toContain('handlerTimeoutMs');
  expect(signals[0]?.aborted).toBe(true); // the handler was told to give up
  await dispatcher.runOnce();
  expect((await consumerRow(db.sql, schema, 'hung')).status).toBe('dead');
});

test('handlerTimeoutMs on a transactional consumer rolls its turn back and still counts the attempt', async () => {
  const schema = await freshSchema(db.sql);
  await db.sql`create table ${db.sql(`${schema}.projection`)} (event_id bigint primary key)`;
  const c = recordingConsumer('hung-projection', {
    transactional: true,
    handlerTimeoutMs: TRANSACTIONAL_TIMEOUT_MS,
    handler: async (event, ctx) => {
      await ctx.tx!`insert into ${ctx.tx!(`${schema}.projection`)} values (${event.id.toString()})`;
      if (event.id === 2n) await new Promise(() => undefined);
    },
  });
  const dispatcher = testDispatcher(db.sql, schema, [c.consumer]);
  await dispatcher.ensureRegistered();
  await appendEvents(db.sql, 2, undefined, schema);
  await dispatcher.runOnce();
  const row = await consumerRow(db.sql, schema, 'hung-projection');
  // The whole turn was rolled back (event 1's write too): the timed-out handler still holds it.
  expect(row).toMatchObject({ cursor: 0n, attempts: 1, stuckEventId: 2n });
  const [count] = await db.sql<
    { n: number }[]
  >`select count(*)::int as n from ${db.sql(`${schema}.projection`)}`;
  expect(count?.n).toBe(0);
});

test.each([
  ['skipApplyErrors', { skipApplyErrors: true }],
  ['parkKey', { parkKey: true }],
] as const)(
  'a transactional handler that times out on its last attempt: %s applies in the next turn, without another call, and the consumer goes on',
  async (_, policy) => {
    const schema = await freshSchema(db.sql);
    await db.sql`create table ${db.sql(`${schema}.projection`)} (event_id bigint primary key)`;
    const calls: bigint[] = [];
    const c = recordingConsumer('hung-projection', {
      transactional: true,
      handlerTimeoutMs: TRANSACTIONAL_TIMEOUT_MS,
      errorPolicy: { maxAttempts: 2, ...policy },
      handler: async (event, ctx) => {
        calls.push(event.id);
        await ctx.tx!`insert into ${ctx.tx!(`${schema}.projection`)} values (${event.id.toString()})`;
        if (event.id === 2n) await new Promise(() => undefined);
      },
    });
    const dispatcher = testDispatcher(db.sql, schema, [c.consumer], { retryDelayMs: 1, retryMaxDelayMs: 1 });
    await dispatcher.ensureRegistered();
    // Events 1 and 3 of one stream, 2 of another (the key parked with parkKey).
    await appendEvents(
      db.sql,
      3,
      (n) => ({ streamId: n === 2 ? 'poison' : 'fine', type: 'T', data: {} }),
      schema,
    );
    await until(
      async () => {
        await dispatcher.runOnce();
        return (await consumerRow(db.sql, schema, 'hung-projection')).cursor === 3n;
      },
      10_000,
      'the consumer to go past the event that timed out',
    );
    const row = await consumerRow(db.sql, schema, 'hung-projection');
    expect(row.status).not.toBe('dead');
    // Two calls of event 2 timed out; none after the second.
    expect(calls.filter((id) => id === 2n)).toEqual([2n, 2n]);
    const projected = await db.sql<{ id: string }[]>`
      select event_id::text as id from ${db.sql(`${schema}.projection`)} order by event_id`;
    expect(projected.map((r) => r.id)).toEqual(['1', '3']);
    const aside = await db.sql<{ id: string; attempts: number; error: string }[]>`
      ${
        'skipApplyErrors' in policy
          ? db.sql`select event_id::text as id, attempts, error from ${db.sql(`${schema}.dead_letters`)}`
          : db.sql`select first_event_id::text as id, attempts, error from ${db.sql(`${schema}.parked_keys`)}`
      }`;
    expect(aside).toEqual([
      { id: '2', attempts: 2, error: expect.stringContaining('handlerTimeoutMs') as string },
    ]);
  },
);

/** A transactional consumer projecting into `${schema}.projection`; `hangs` says which calls never settle. */
async function projecting(
  options: Partial<Consumer> & { hangs: (event: EventRecord) => boolean },
  dispatcherOptions: Partial<DispatcherOptions> = {},
) {
  const schema = await freshSchema(db.sql);
  await db.sql`create table ${db.sql(`${schema}.projection`)} (event_id bigint primary key)`;
  const calls: bigint[] = [];
  const { hangs, ...rest } = options;
  const c = recordingConsumer('projection', {
    transactional: true,
    handlerTimeoutMs: TRANSACTIONAL_TIMEOUT_MS,
    handler: async (event, ctx) => {
      calls.push(event.id);
      await ctx.tx!`insert into ${ctx.tx!(`${schema}.projection`)} values (${event.id.toString()})`;
      if (hangs(event)) await new Promise(() => undefined);
    },
    ...rest,
  });
  const dispatcher = testDispatcher(db.sql, schema, [c.consumer], {
    retryDelayMs: 1,
    retryMaxDelayMs: 1,
    ...dispatcherOptions,
  });
  await dispatcher.ensureRegistered();
  const projected = async () =>
    (
      await db.sql<{ id: string }[]>`
        select event_id::text as id from ${db.sql(`${schema}.projection`)} order by event_id`
    ).map((r) => Number(r.id));
  /** Runs passes until the row is `done`. */
  const turnUntil = (done: (row: ConsumerRow) => boolean, what: string) =>
    until(
      async () => {
        await dispatcher.runOnce();
        return done(await consumerRow(db.sql, schema, 'projection'));
      },
      10_000,
      what,
    );
  const until5 = (what: string) => turnUntil((row) => row.cursor === 5n || row.status === 'dead', what);
  return { schema, dispatcher, calls, projected, turnUntil, until5 };
}

test.each([
  ['skipApplyErrors', { skipApplyErrors: true }],
  ['parkKey', { parkKey: true }],
] as const)(
  'two events of one transactional batch time out on their one attempt (%s): each is set aside after one call, the others projected once',
  async (_, policy) => {
    const t = await projecting({
      errorPolicy: { maxAttempts: 1, ...policy },
      hangs: (event) => event.id === 2n || event.id === 4n,
    });
    await appendEvents(db.sql, 5, (n) => ({ streamId: `s-${n}`, type: 'T', data: {} }), t.schema);
    // A later event's timeout rolled back the turn that had set the earlier one aside: each turn
    // then redid it, called the earlier event again and timed out on it, for ever.
    await t.until5('the consumer to go past both events');
    expect((await consumerRow(db.sql, t.schema, 'projection')).status).not.toBe('dead');
    expect(t.calls.filter((id) => id === 2n || id === 4n)).toEqual([2n, 4n]);
    expect(await t.projected()).toEqual([1, 3, 5]);
  },
);

test('a transactional handler that times out on its last attempt, no policy: the events before it commit with the cursor, and the consumer ends on it', async () => {
  const t = await projecting({ errorPolicy: { maxAttempts: 2 }, hangs: (event) => event.id === 3n });
  await appendEvents(db.sql, 5, undefined, t.schema);
  await t.until5('the consumer to end on event 3');
  expect(await consumerRow(db.sql, t.schema, 'projection')).toMatchObject({
    status: 'dead',
    cursor: 2n,
    stuckEventId: 3n,
    attempts: 2,
  });
  expect(await t.projected()).toEqual([1, 2]);
});

test("a transactional batchHandler's timeout is no attempt: its first event goes to handler, and only the event that hangs there is dead-lettered", async () => {
  const batches: bigint[][] = [];
  const t = await projecting({
    errorPolicy: { maxAttempts: 1, skipApplyErrors: true },
    batchHandler: async (events) => {
      batches.push(events.map((e) => e.id));
      if (events.some((e) => e.id === 3n)) await new Promise(() => undefined);
    },
    hangs: (event) => event.id === 3n,
  });
  await appendEvents(db.sql, 5, undefined, t.schema);
  await t.until5('the consumer to go past event 3');
  expect(batches[0]).toEqual([1n, 2n, 3n, 4n, 5n]);
  // After the batch's timeout, one by one through handler in this process: first the batch's
  // first event, once (it was not charged with the batch's timeout, nor set aside for it).
  expect(batches).toHaveLength(1);
  expect(t.calls[0]).toBe(1n);
  expect(t.calls.filter((id) => id === 1n)).toEqual([1n]);
  const letters = await db.sql<{ id: string; attempts: number }[]>`
    select event_id::text as id, attempts from ${db.sql(`${t.schema}.dead_letters`)}`;
  expect(letters).toEqual([{ id: '3', attempts: 1 }]);
  expect(await t.projected()).toEqual([1, 2, 4, 5]);
});

test.each([true, false])(
  'a replayed dead letter whose transactional handler times out (countCrashedAttempts %s) is its one attempt: recorded on the dead letter, the consumer goes on',
  async (countCrashedAttempts) => {
    // A deployment with skipApplyErrors dead-letters event 2; the next one has no policy, and its
    // handler hangs on the replay. The event is below the cursor: the consumer row is not its.
    const first = await projecting({
      errorPolicy: { maxAttempts: 1, skipApplyErrors: true },
      hangs: () => false,
      handler: (event) => {
        if (event.id === 2n) throw new Error('cannot project 2');
      },
    });
    await appendEvents(db.sql, 3, undefined, first.schema);
    await drainUntilIdle(first.dispatcher);
    await first.dispatcher.stop();
    const c = recordingConsumer('projection', {
      transactional: true,
      handlerTimeoutMs: TRANSACTIONAL_TIMEOUT_MS,
      errorPolicy: { maxAttempts: 1 },
      handler: async (event) => {
        if (event.id === 2n) await new Promise(() => undefined);
      },
    });
    const second = testDispatcher(db.sql, first.schema, [c.consumer], { countCrashedAttempts });
    await second.ensureRegistered();
    await db.sql`update ${db.sql(`${first.schema}.dead_letters`)} set replay_requested_at = now()`;
    await second.runOnce();
    await appendEvents(db.sql, 1, undefined, first.schema);
    await drainUntilIdle(second);
    expect(await consumerRow(db.sql, first.schema, 'projection')).toMatchObject({
      status: 'idle',
      cursor: 4n,
      attempts: 0,
    });
    const [letter] = await db.sql<
      { requested: boolean; replayed: boolean; attempts: number; error: string }[]
    >`
      select replay_requested_at is not null as requested, replayed_at is not null as replayed, attempts, error
      from ${db.sql(`${first.schema}.dead_letters`)}`;
    expect(letter).toEqual({
      requested: false,
      replayed: false,
      attempts: 2,
      error: expect.stringContaining('handlerTimeoutMs') as string,
    });
  },
);

test('replayed dead letters go to a transactional handler one by one: a batchHandler that hangs on the second does not fail the first', async () => {
  // A deployment with skipApplyErrors dead-letters events 2 and 3; the next one's handlers hang on
  // 3. A batch of both replays timing out would be charged to 2, which was never called.
  const first = await projecting({
    errorPolicy: { maxAttempts: 1, skipApplyErrors: true },
    hangs: () => false,
    handler: (event) => {
      if (event.id === 2n || event.id === 3n) throw new Error(`cannot project ${event.id}`);
    },
  });
  await appendEvents(db.sql, 4, undefined, first.schema);
  await drainUntilIdle(first.dispatcher);
  await first.dispatcher.stop();
  const batches: bigint[][] = [];
  const c = recordingConsumer('projection', {
    transactional: true,
    handlerTimeoutMs: TRANSACTIONAL_TIMEOUT_MS,
    errorPolicy: { maxAttempts: 1 },
    handler: async (event) => {
      if (event.id === 3n) await new Promise(() => undefined);
    },
    batchHandler: async (events) => {
      batches.push(events.map((e) => e.id));
      if (events.some((e) => e.id === 3n)) await new Promise(() => undefined);
    },
  });
  const second = testDispatcher(db.sql, first.schema, [c.consumer]);
  await second.ensureRegistered();
  await db.sql`update ${db.sql(`${first.schema}.dead_letters`)} set replay_requested_at = now()`;
  await drainUntilIdle(second);
  expect(batches).toEqual([]);
  const letters = await db.sql<{ id: string; requested: boolean; replayed: boolean; error: string }[]>`
    select event_id::text as id, replay_requested_at is not null as requested, replayed_at is not null as replayed,
           error
    from ${db.sql(`${first.schema}.dead_letters`)} order by event_id`;
  expect(letters).toEqual([
    { id: '2', requested: false, replayed: true, error: 'cannot project 2' },
    {
      id: '3',
      requested: false,
      replayed: false,
      error: expect.stringContaining('handlerTimeoutMs') as string,
    },
  ]);
});

test("an infrastructure failure recorded while a timed-out attempt waits for its turn keeps that attempt's record: no call past maxAttempts", async () => {
  const t = await projecting({
    errorPolicy: { maxAttempts: 2, skipApplyErrors: true },
    hangs: (event) => event.id === 2n,
  });
  await appendEvents(db.sql, 5, undefined, t.schema);
  await t.turnUntil((row) => row.attempts === 2, 'two timeouts on event 2');
  // What a turn of the row that fails on its connection records (PassRunner's infrastructure path).
  await recordInfraFailure(db.sql, tables(db.sql, t.schema), 'projection', '*', {
    message: 'connection lost',
    category: 'connection',
    undoTurnStart: false,
    turn: { heldXmin: null, startSent: false },
  });
  await t.until5('the consumer to go past event 2');
  expect(t.calls.filter((id) => id === 2n)).toEqual([2n, 2n]);
  const letters = await db.sql<{ attempts: number; error: string }[]>`
    select attempts, error from ${db.sql(`${t.schema}.dead_letters`)}`;
  expect(letters).toEqual([{ attempts: 2, error: expect.stringContaining('handlerTimeoutMs') as string }]);
});

test('a timed-out attempt that did not use up maxAttempts, then a lower maxAttempts deployed: the event gets one more call, as any failed attempt would', async () => {
  const t = await projecting({
    errorPolicy: { maxAttempts: 3, skipApplyErrors: true },
    hangs: (event) => event.id === 2n,
  });
  await appendEvents(db.sql, 3, undefined, t.schema);
  await t.turnUntil((row) => row.attempts === 1, 'one timeout on event 2');
  await t.dispatcher.stop();
  const calls: bigint[] = [];
  const c = recordingConsumer('projection', {
    transactional: true,
    handlerTimeoutMs: TRANSACTIONAL_TIMEOUT_MS,
    errorPolicy: { maxAttempts: 1, skipApplyErrors: true },
    handler: async (event) => {
      calls.push(event.id);
      if (event.id === 2n) await new Promise(() => undefined);
    },
  });
  const lowered = testDispatcher(db.sql, t.schema, [c.consumer], { retryDelayMs: 1, retryMaxDelayMs: 1 });
  await lowered.ensureRegistered();
  await until(
    async () => {
      await lowered.runOnce();
      return (await consumerRow(db.sql, t.schema, 'projection')).cursor === 3n;
    },
    10_000,
    'the consumer to go past event 2',
  );
  expect(calls.filter((id) => id === 2n)).toEqual([2n]);
  const letters = await db.sql<{ id: string; attempts: number }[]>`
    select event_id::text as id, attempts from ${db.sql(`${t.schema}.dead_letters`)}`;
  expect(letters).toEqual([{ id: '2', attempts: 2 }]);
});

test('a failed event is retried after a delay that doubles with each attempt, for every instance alike', async () => {
  let calls = 0;
  const c = recordingConsumer('patient', {
    errorPolicy: { maxAttempts: 5 },
    handler: () => {
      calls += 1;
      throw new Error('downstream unavailable');
    },
  });
  const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer], {
    retryDelayMs: 1_000,
    retryMaxDelayMs: 2_000,
  });
  await appendEvents(db.sql, 1, undefined, schema);
  await dispatcher.runOnce();
  expect(calls).toBe(1);
  // Right after the failure: the consumer waits (no turn, no row lock).
  expect((await dispatcher.runOnce()).byConsumer['patient']?.skipped).toBe('retry-later');
  expect(calls).toBe(1);
  // Another instance honours the same wait: it is counted from last_error_at in the database.
  const other = testDispatcher(db.sql, schema, [c.consumer], { retryDelayMs: 1_000, retryMaxDelayMs: 2_000 });
  await other.ensureRegistered();
  expect((await other.runOnce()).byConsumer['patient']?.skipped).toBe('retry-later');
  await new Promise((resolve) => setTimeout(resolve, 1_050));
  await dispatcher.runOnce();
  expect(calls).toBe(2);
  expect((await consumerRow(db.sql, schema, 'patient')).attempts).toBe(2);
  // The second wait is twice as long (2 s, the cap): 1 s on it still waits. (Seconds, not
  // hundreds of ms: a pass on a loaded CI machine took longer than the 250 ms those left.)
  await new Promise((resolve) => setTimeout(resolve, 1_050));
  expect((await dispatcher.runOnce()).byConsumer['patient']?.skipped).toBe('retry-later');
});

import { appendEvents, consumerRow, freshSchema, gate, recordingConsumer, until } from '@sluice/testing';
import { registeredDispatcher, useTestDatabase } from '@sluice/testing/vitest';
import { afterEach, describe, expect, onTestFinished, test, vi } from 'vitest';
import type { Consumer } from '../consumers/consumer.js';
import { tables } from '../schema/tables.js';
import type { Sql, TransactionSql } from '../sql-types.js';
import { SharedReads } from './shared-reads.js';
import { readFrom } from './turn-steps.js';
import { testDispatcher } from '../test-support.js';
import type { Dispatcher } from './create-dispatcher.js';

const db = await useTestDatabase();

/**
 * A registered dispatcher of `consumer` whose turns run on connections named `sluice:<instanceId>`
 * (so a test can terminate them) and whose failed turns are retried at once, `events` appended.
 */
async function retryingAtOnce(
  pool: Sql,
  schema: string,
  consumer: Consumer,
  instanceId: string,
  events: number,
): Promise<Dispatcher> {
  const dispatcher = await registeredInstance(pool, schema, consumer, instanceId, 1);
  await appendEvents(db.sql, events, undefined, schema);
  return dispatcher;
}

/**
 * A registered dispatcher of `consumer` as instance `instanceId` (its turns' connections are named
 * `sluice:<instanceId>`), backing the consumer off for `backoffMs` after an infrastructure failure.
 */
async function registeredInstance(
  pool: Sql,
  schema: string,
  consumer: Consumer,
  instanceId: string,
  backoffMs: number,
): Promise<Dispatcher> {
  const dispatcher = testDispatcher(pool, schema, [consumer], {
    instanceId,
    backoffInitialMs: backoffMs,
    backoffMaxMs: backoffMs,
  });
  await dispatcher.ensureRegistered();
  return dispatcher;
}

test('a terminated turn backend is an infra failure: recorded with its category, backed off, attempts untouched', async () => {
  const schema = await freshSchema(db.sql);
  let pid = 0;
  let firstDelivery = true;
  const proceed = gate();
  const victim = recordingConsumer('victim', {
    transactional: true,
    handler: async (_event, ctx) => {
      if (!firstDelivery) return;
      firstDelivery = false;
      const [row] = await ctx.tx!<{ pid: number }[]>`select pg_backend_pid() as pid`;
      pid = row!.pid;
      await proceed.promise;
    },
  });
  const bystander = recordingConsumer('bystander');
  const dispatcher = testDispatcher(db.sql, schema, [victim.consumer, bystander.consumer], {
    // Long enough that the next pass falls inside it on a loaded machine (300 ms did not in CI).
    backoffInitialMs: 3_000,
    backoffMaxMs: 60_000,
  });
  await dispatcher.ensureRegistered();
  await appendEvents(db.sql, 3, undefined, schema);

  const pass = dispatcher.runOnce();
  await until(() => pid !== 0, 5_000, 'the victim turn to be in its handler');
  await db.sql`select pg_terminate_backend(${pid})`;
  proceed.open();
  const result = await pass;

  expect(result.byConsumer['victim']?.skipped).toBe('failed');
  expect(result.byConsumer['bystander']?.processed).toBe(3); // the others keep flowing
  const failed = await consumerRow(db.sql, schema, 'victim');
  expect(failed).toMatchObject({ cursor: 0n, attempts: 0, failureCategory: 'connection', status: 'idle' });
  expect(failed.lastError).toMatch(/terminat|CONNECTION_CLOSED/i);

  // Backing off: the next pass does not touch it.
  expect((await dispatcher.runOnce()).byConsumer['victim']?.skipped).toBe('backoff');

  // And it recovers once the backoff is over, still without a counted attempt.
  await until(
    async () => ((await dispatcher.runOnce()).byConsumer['victim']?.processed ?? 0) === 3,
    20_000,
    'recovery',
  );
  expect(await consumerRow(db.sql, schema, 'victim')).toMatchObject({ cursor: 3n, attempts: 0 });
  const [marker] = await db.sql`select * from ${db.sql(`${schema}.turn_starts`)}`;
  expect(marker).toBeUndefined();
});

test('a turn whose connection dies under a handler calls no further handler and never overlaps the next turn (R1c)', async () => {
  const schema = await freshSchema(db.sql);
  // The dispatcher's turns run on connections of its own, named after its instance.
  const application = 'sluice:r1c';
  const pool = db.connect({ max: 4 });
  const calls: bigint[] = [];
  let inFlight = 0;
  let maxInFlight = 0;
  let returned = 0;
  let terminated = false;
  const consumer = recordingConsumer('shared', {
    handler: async (event) => {
      inFlight += 1;
      maxInFlight = Math.max(maxInFlight, inFlight);
      calls.push(event.id);
      try {
        if (!terminated) {
          terminated = true;
          // The turn's backend (it holds an xid: FOR UPDATE on the cursor row) dies under this call.
          await db.sql`
            select pg_terminate_backend(pid) from pg_stat_activity
            where application_name = ${application} and backend_xid is not null`;
        }
        await new Promise((resolve) => setTimeout(resolve, 200));
      } finally {
        inFlight -= 1;
        returned += 1;
      }
    },
  });
  const dispatcher = await retryingAtOnce(pool, schema, consumer.consumer, 'r1c', 5);

  const failed = await dispatcher.runOnce();
  expect(failed.byConsumer['shared']?.skipped).toBe('failed');
  // Had the dead turn gone on, it would call the handler for event 2 as soon as its call for
  // event 1 returned: once that call has returned (and its continuation has run), nothing more.
  await until(() => returned === 1, 10_000, "the dead turn's handler call to return");
  await new Promise(setImmediate);
  expect(calls).toEqual([1n]);

  await until(
    async () => ((await dispatcher.runOnce()).byConsumer['shared']?.processed ?? 0) === 5,
    10_000,
    'the next turn to deliver the batch',
  );
  expect(calls).toEqual([1n, 1n, 2n, 3n, 4n, 5n]);
  expect(maxInFlight).toBe(1);
  expect(await consumerRow(db.sql, schema, 'shared')).toMatchObject({ cursor: 5n, attempts: 0 });
});

test("a transactional turn whose connection dies while its handler awaits a call of its own, which then fails with ECONNRESET: the turn's loss, not the handler's attempt; nothing of it commits", async () => {
  const schema = await freshSchema(db.sql);
  const application = 'sluice:econnreset';
  const pool = db.connect({ max: 4 });
  onTestFinished(() => pool.end({ timeout: 1 }));
  await db.sql`create table ${db.sql(`${schema}.projection`)} (n bigint)`;
  let calls = 0;
  const consumer = recordingConsumer('writer', {
    transactional: true,
    errorPolicy: { maxAttempts: 5 },
    handler: async (event, ctx) => {
      calls += 1;
      const tx = ctx.tx!;
      await tx`insert into ${tx(`${schema}.projection`)} values (${event.id.toString()})`;
      if (calls > 1) return;
      // The turn's backend dies under this call, and the handler's own call fails as a reset does.
      await db.sql`
        select pg_terminate_backend(pid) from pg_stat_activity
        where application_name = ${application} and backend_xid is not null`;
      throw Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' });
    },
  });
  const dispatcher = await retryingAtOnce(pool, schema, consumer.consumer, 'econnreset', 1);
  expect((await dispatcher.runOnce()).byConsumer['writer']?.skipped).toBe('failed');
  expect(await consumerRow(db.sql, schema, 'writer')).toMatchObject({
    cursor: 0n,
    attempts: 0,
    failureCategory: 'connection',
  });
  await until(
    async () => ((await dispatcher.runOnce()).byConsumer['writer']?.processed ?? 0) === 1,
    10_000,
    'the next turn to deliver the event',
  );
  const rows = await db.sql<{ n: string }[]>`select n::text from ${db.sql(`${schema}.projection`)}`;
  expect(rows).toEqual([{ n: '1' }]);
});

test('a transactional turn whose connection dies under its running handler ends only once the handler has returned, and stop() waits for it', async () => {
  const schema = await freshSchema(db.sql);
  const application = 'sluice:tx-handler-runs-on';
  const pool = db.connect({ max: 4 });
  onTestFinished(() => pool.end({ timeout: 1 }));
  let called = 0;
  let returned = 0;
  const consumer = recordingConsumer('writer', {
    transactional: true,
    handler: async () => {
      called += 1;
      try {
        // The turn's backend dies under this call, which goes on with work of its own.
        await db.sql`
          select pg_terminate_backend(pid) from pg_stat_activity
          where application_name = ${application} and backend_xid is not null`;
        await new Promise((resolve) => setTimeout(resolve, 300));
      } finally {
        returned += 1;
      }
    },
  });
  const dispatcher = await retryingAtOnce(pool, schema, consumer.consumer, 'tx-handler-runs-on', 1);
  expect((await dispatcher.runOnce()).byConsumer['writer']?.skipped).toBe('failed');
  expect(returned).toBe(1);
  // Once more, under stop(): it returns once the handler has.
  const again = dispatcher.runOnce().catch(() => undefined);
  await until(() => called === 2, 10_000, 'the second call');
  await dispatcher.stop();
  expect(returned).toBe(2);
  await again;
});

test("a turn whose connection dies under a running handler takes its start back at once: another instance's turn meanwhile counts no crash", async () => {
  const schema = await freshSchema(db.sql);
  const aHolds = gate();
  let aCalls = 0;
  const bSeen: bigint[] = [];
  const shared = (instance: string) =>
    recordingConsumer('shared', {
      errorPolicy: { maxAttempts: 1 },
      handler: async (event) => {
        if (instance === 'b') bSeen.push(event.id);
        if (instance !== 'a' || (aCalls += 1) > 1) return;
        // A's turn backend (it holds an xid: FOR UPDATE on the cursor row) dies under this call,
        // which goes on until the test lets it return.
        await db.sql`
          select pg_terminate_backend(pid) from pg_stat_activity
          where application_name = 'sluice:a' and backend_xid is not null`;
        await aHolds.promise;
      },
    });
  const a = await registeredInstance(db.sql, schema, shared('a').consumer, 'a', 60_000);
  await appendEvents(db.sql, 1, undefined, schema);
  const aPass = a.runOnce();
  // While A's handler still runs, its start record is taken back.
  await until(
    async () =>
      (
        await db.sql<{ started_count: number }[]>`
          select started_count from ${db.sql(`${schema}.turn_starts`)} where consumer_name = 'shared'`
      )[0]?.started_count === 0,
    10_000,
    "A's start record to be taken back",
  );
  const bDispatcher = await registeredInstance(db.sql, schema, shared('b').consumer, 'b', 60_000);
  await bDispatcher.runOnce();
  expect(bSeen).toEqual([1n]);
  expect(await consumerRow(db.sql, schema, 'shared')).toMatchObject({
    cursor: 1n,
    attempts: 0,
    status: 'idle',
  });
  aHolds.open();
  expect((await aPass).byConsumer['shared']?.skipped).toBe('failed');
  expect(await consumerRow(db.sql, schema, 'shared')).toMatchObject({
    cursor: 1n,
    attempts: 0,
    status: 'idle',
  });
});

test('a turn whose connection dies while it waits for a read of another turn records no start once it goes on', async () => {
  const schema = await freshSchema(db.sql);
  const t = tables(db.sql, schema);
  const calls: string[] = [];
  const shared = (instance: string) =>
    recordingConsumer('shared', {
      errorPolicy: { maxAttempts: 1 },
      batchSize: 2,
      handler: (event) => {
        calls.push(`${instance}:${event.id}`);
      },
    });
  const a = await registeredInstance(db.sql, schema, shared('a').consumer, 'a', 60_000);
  await appendEvents(db.sql, 4, undefined, schema);
  // A's turn takes another turn's full read of its events (one still running, on a busy pool);
  // its own connection dies meanwhile, and its failure is recorded, before the read comes back.
  let once = true;
  vi.spyOn(SharedReads.prototype, 'has').mockImplementation(() => once);
  // Asked only while `has` says yes: once.
  vi.spyOn(SharedReads.prototype, 'take').mockImplementation(async (...args) => {
    once = false;
    await db.sql`select pg_terminate_backend(pid) from pg_stat_activity
                 where application_name = 'sluice:a' and backend_xid is not null`;
    await until(
      async () => (await consumerRow(db.sql, schema, 'shared')).lastError !== null,
      10_000,
      "A's failure to be recorded",
    );
    const [cursor, limit] = args;
    return readFrom(db.sql as unknown as TransactionSql, t, cursor, [], limit, undefined);
  });
  expect((await a.runOnce()).byConsumer['shared']?.skipped).toBe('failed');
  vi.restoreAllMocks();
  expect(calls).toEqual([]);
  expect(await db.sql`select 1 from ${t.turnStarts} where started_count > 0`).toHaveLength(0);
  // So the next turn, another instance's, counts no crash.
  const b = await registeredInstance(db.sql, schema, shared('b').consumer, 'b', 60_000);
  await b.runOnce();
  expect(calls).toEqual(['b:1', 'b:2']);
  expect(await consumerRow(db.sql, schema, 'shared')).toMatchObject({
    cursor: 2n,
    attempts: 0,
    status: 'processing', // two more to go
  });
});

test('a dead turn writes nothing after its connection is reopened for other work: no cursor regression (I4)', async () => {
  const schema = await freshSchema(db.sql);
  const application = 'sluice:zombie-a'; // the connections dispatcher A opens for itself
  const poolA = db.connect({ max: 3 });
  const poolB = db.connect({ max: 3 });
  onTestFinished(async () => {
    await poolA.end({ timeout: 1 });
    await poolB.end({ timeout: 1 });
  });
  const cursorNow = async () => (await consumerRow(db.sql, schema, 'c')).cursor;
  let cursorByB = 0n;
  let killed = false;
  const options = { concurrency: 1, countCrashedAttempts: false, batchSize: 10 } as const;
  const b = testDispatcher(poolB, schema, [{ name: 'c', handler: () => undefined }], options);
  const a = testDispatcher(
    poolA,
    schema,
    [
      {
        name: 'c',
        handler: async (event) => {
          if (event.id !== 1n || killed) return;
          killed = true;
          // A's turn backend dies while its handler runs; B takes the consumer over and moves on.
          await db.sql`
            select pg_terminate_backend(pid) from pg_stat_activity
            where application_name = ${application} and state = 'idle in transaction'`;
          await appendEvents(db.sql, 10, undefined, schema);
          while ((await cursorNow()) < 20n) await b.runOnce();
          cursorByB = await cursorNow();
          // Ordinary traffic reopens connections: the dead turn must not write through any of them.
          await Promise.all([1, 2, 3].map(() => poolA`select pg_sleep(0.1)`));
          await b.runOnce();
        },
      },
    ],
    { ...options, instanceId: 'zombie-a' },
  );
  await a.ensureRegistered();
  await b.ensureRegistered();
  await appendEvents(db.sql, 10, undefined, schema);

  const result = await a.runOnce();
  expect(result.byConsumer['c']?.skipped).toBe('failed');
  expect(cursorByB).toBe(20n);
  expect(await cursorNow()).toBe(20n); // the dead turn would have saved cursor 10 in autocommit
});

test('a turn whose last write fails commits nothing and is an infra failure, though its COMMIT was already sent', async () => {
  const consumer = recordingConsumer('c');
  const { schema, dispatcher } = await registeredDispatcher(db.sql, [consumer.consumer], {
    backoffInitialMs: 200,
    backoffMaxMs: 60_000,
  });
  await appendEvents(db.sql, 3, undefined, schema);
  // The turn's state write is its last statement before COMMIT: make the server refuse it.
  await db.sql.unsafe(`
    create function ${schema}.refuse_cursor() returns trigger language plpgsql as $$
    begin raise exception 'cursor write refused by the test'; end $$;
    create trigger refuse_cursor before update on ${schema}.consumers
      for each row when (new.cursor > old.cursor) execute function ${schema}.refuse_cursor();`);

  const result = await dispatcher.runOnce();

  expect(consumer.ids()).toEqual([1n, 2n, 3n]); // delivered, then the turn rolled back
  expect(result.byConsumer['c']).toMatchObject({ processed: 0, skipped: 'failed' });
  const failed = await consumerRow(db.sql, schema, 'c');
  expect(failed).toMatchObject({ cursor: 0n, attempts: 0 });
  expect(failed.lastError).toMatch(/cursor write refused by the test/);
  expect(failed.failureCategory).not.toBeNull();

  await db.sql.unsafe(`drop trigger refuse_cursor on ${schema}.consumers`);
  await until(
    async () => ((await dispatcher.runOnce()).byConsumer['c']?.processed ?? 0) === 3,
    10_000,
    'the events delivered again once the write is accepted',
  );
  expect(await consumerRow(db.sql, schema, 'c')).toMatchObject({ cursor: 3n, attempts: 0 });
});

describe('in-process waits follow a monotonic clock, not the wall clock', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  /** A dispatcher whose one consumer has just failed a turn (its events table was away). */
  async function failedTurn(backoffInitialMs: number) {
    const c = recordingConsumer('clocked');
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer], { backoffInitialMs });
    await appendEvents(db.sql, 2, undefined, schema);
    await db.sql`alter table ${db.sql(`${schema}.events`)} rename to events_away`;
    expect((await dispatcher.runOnce()).byConsumer['clocked']?.skipped).toBe('failed');
    await db.sql`alter table ${db.sql(`${schema}.events_away`)} rename to events`;
    return { dispatcher, c };
  }

  test('a wall clock stepped back an hour does not stretch an infrastructure backoff', async () => {
    const { dispatcher, c } = await failedTurn(200);
    vi.useFakeTimers({ toFake: ['Date'], shouldAdvanceTime: true });
    vi.setSystemTime(Date.now() - 3_600_000);
    const deadline = performance.now() + 5_000;
    while (c.ids().length < 2 && performance.now() < deadline) {
      await dispatcher.runOnce();
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(c.ids()).toEqual([1n, 2n]); // after 200 ms, not after an hour
  });

  test('a wall clock stepped forward an hour does not cut an infrastructure backoff short', async () => {
    const { dispatcher, c } = await failedTurn(30_000);
    vi.useFakeTimers({ toFake: ['Date'], shouldAdvanceTime: true });
    vi.setSystemTime(Date.now() + 3_600_000);
    expect((await dispatcher.runOnce()).byConsumer['clocked']?.skipped).toBe('backoff');
    expect(c.ids()).toEqual([]);
  });
});

import { get } from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import postgres from 'postgres';
import {
  appendEvents,
  consumerRow,
  drainUntilIdle,
  failingOn,
  freshSchema,
  gate,
  passUntil,
  recordingConsumer,
  until,
  postgresJsMajor,
} from '@sluice/testing';
import { heldTransaction, registeredDispatcher, useTestDatabase } from '@sluice/testing/vitest';
import { describe, expect, onTestFinished, test } from 'vitest';
import { append, transaction } from '../append.js';
import type { Consumer, HandlerContext } from '../consumers/consumer.js';
import type { EventRecord } from '../events.js';
import { testDispatcher } from '../test-support.js';
import { migrate } from '../schema/migrate.js';
import { DispatcherNotRegisteredError, DispatcherStoppedError } from '../errors.js';

const db = await useTestDatabase();

describe('cursors and poison', () => {
  test('a poisoned consumer never holds back another', async () => {
    const poisoned = failingOn('poisoned', (e) => e.id === 2n, { errorPolicy: { maxAttempts: 100 } });
    const healthy = recordingConsumer('healthy');
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [poisoned.consumer, healthy.consumer]);
    await appendEvents(db.sql, 5, undefined, schema);
    for (let i = 0; i < 3; i++) await dispatcher.runOnce();
    expect(healthy.ids()).toEqual([1n, 2n, 3n, 4n, 5n]);
    expect(poisoned.ids()).toEqual([1n]);
    expect(await consumerRow(db.sql, schema, 'healthy')).toMatchObject({ cursor: 5n, attempts: 0 });
  });

  test('keeps the cursor before a failing event, counts attempts, and is dead with last_error at maxAttempts', async () => {
    const c = failingOn('mailer', (e) => e.id === 2n, { errorPolicy: { maxAttempts: 3 } });
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer], {
      rearmCooldownMs: 3_600_000,
    });
    await appendEvents(db.sql, 3, undefined, schema);
    await dispatcher.runOnce();
    expect(await consumerRow(db.sql, schema, 'mailer')).toMatchObject({
      cursor: 1n,
      attempts: 1,
      status: 'processing',
      stuckEventId: 2n,
    });
    await dispatcher.runOnce();
    expect((await consumerRow(db.sql, schema, 'mailer')).attempts).toBe(2);
    await dispatcher.runOnce();
    const dead = await consumerRow(db.sql, schema, 'mailer');
    expect(dead).toMatchObject({ cursor: 1n, attempts: 3, status: 'dead', stuckEventId: 2n });
    expect(dead.lastError).toContain('poison event 2');
    // Dead is frozen: more passes deliver nothing and change nothing.
    const result = await dispatcher.runOnce();
    expect(result.byConsumer['mailer']?.skipped).toBe('dead');
    expect(c.failures.get(2n)).toBe(3);
    expect(c.ids()).toEqual([1n]);
    expect(await consumerRow(db.sql, schema, 'mailer')).toEqual(dead);
  });

  test('a handler error whose text PostgreSQL cannot store (NUL) or cannot be read, or a thrown value whose class cannot be asked, still counts, and is dead-lettered', async () => {
    const unreadable = new Error('x');
    Object.defineProperty(unreadable, 'message', {
      get() {
        throw new Error('no message');
      },
    });
    // A value whose class cannot be asked: every trap throws.
    const trap = () => {
      throw new Error('a trap');
    };
    const proxy = new Proxy({}, { get: trap, has: trap, getPrototypeOf: trap, ownKeys: trap });
    const errors: Record<string, unknown> = {
      '2': new Error('cannot parse payload: \u0000\u0001'),
      '3': unreadable,
      '4': proxy,
    };
    const consumer: Consumer = {
      name: 'parser',
      errorPolicy: { maxAttempts: 2, skipApplyErrors: true },
      handler: (e) => {
        if (errors[String(e.id)]) throw errors[String(e.id)];
      },
    };
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [consumer]);
    await appendEvents(db.sql, 5, undefined, schema);
    await drainUntilIdle(dispatcher);
    expect(await consumerRow(db.sql, schema, 'parser')).toMatchObject({
      cursor: 5n,
      attempts: 0,
      status: 'idle',
    });
    const letters = await db.sql<{ event_id: string; error: string; attempts: number }[]>`
      select event_id::text, error, attempts from ${db.sql(`${schema}.dead_letters`)} order by event_id`;
    expect(letters).toEqual([
      { event_id: '2', error: 'cannot parse payload: \uFFFD\u0001', attempts: 2 },
      { event_id: '3', error: 'an error whose message could not be read', attempts: 2 },
      { event_id: '4', error: 'the handler threw a value that cannot be read (a trap)', attempts: 2 },
    ]);
  });

  test('skipApplyErrors records the event in dead_letters and continues past it', async () => {
    const c = failingOn('indexer', (e) => e.id === 2n, {
      errorPolicy: { maxAttempts: 2, skipApplyErrors: true },
    });
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer]);
    await appendEvents(db.sql, 4, undefined, schema);
    await drainUntilIdle(dispatcher);
    expect(c.ids()).toEqual([1n, 3n, 4n]);
    expect(await consumerRow(db.sql, schema, 'indexer')).toMatchObject({
      cursor: 4n,
      attempts: 0,
      status: 'idle',
    });
    const letters = await db.sql<
      { event_id: string; reason: string; error: string; attempts: number; type: string }[]
    >`
      select event_id::text, reason, error, attempts, type from ${db.sql(`${schema}.dead_letters`)}`;
    expect(letters).toEqual([
      { event_id: '2', reason: 'apply-error', error: 'poison event 2', attempts: 2, type: 'TestEvent' },
    ]);
    const [copy] = await db.sql<{ kind: string; n: number }[]>`
      select jsonb_typeof(data) as kind, (data->>'n')::int as n from ${db.sql(`${schema}.dead_letters`)}`;
    expect(copy).toEqual({ kind: 'object', n: 1 }); // the event copied as a jsonb object, not a string
  });

  test('skipApplyErrors dead-letters an event nested deeper than JSON.stringify can write, payload intact, and goes on', async () => {
    const c = failingOn('deep', (e) => e.type === 'Deep', {
      errorPolicy: { maxAttempts: 2, skipApplyErrors: true },
    });
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer]);
    await appendEvents(db.sql, 1, undefined, schema);
    // 10,000 levels, written in SQL: PostgreSQL stores deeper jsonb than a call stack can serialise.
    await db.sql`
      insert into ${db.sql(`${schema}.events`)} (stream_id, type, data, metadata)
      values ('deep', 'Deep', ('{"a":' || repeat('[', 10000) || repeat(']', 10000) || '}')::jsonb,
              ('{"m":' || repeat('[', 10000) || repeat(']', 10000) || '}')::jsonb)`;
    await appendEvents(db.sql, 1, undefined, schema);
    await drainUntilIdle(dispatcher);
    expect(c.ids()).toEqual([1n, 3n]);
    expect(await consumerRow(db.sql, schema, 'deep')).toMatchObject({
      cursor: 3n,
      attempts: 0,
      status: 'idle',
    });
    // Compared in SQL: the payload as PostgreSQL holds it, never through JavaScript.
    const letters = await db.sql<{ event_id: string; attempts: number; data: boolean; metadata: boolean }[]>`
      select d.event_id::text, d.attempts, d.data::text = e.data::text as data,
             d.metadata::text = e.metadata::text as metadata
      from ${db.sql(`${schema}.dead_letters`)} d join ${db.sql(`${schema}.events`)} e on e.id = d.event_id`;
    expect(letters).toEqual([{ event_id: '2', attempts: 2, data: true, metadata: true }]);
  });

  test('a logger that throws or rejects on every line changes nothing: failures are still counted and dead-lettered', async () => {
    const c = failingOn('logged', (e) => e.id === 2n, {
      errorPolicy: { maxAttempts: 2, skipApplyErrors: true },
    });
    const calls: string[] = [];
    // Every other line throws, the others reject (an async logger): neither may reach the turn.
    const throwing = (level: string) => () => {
      calls.push(level);
      if (calls.length % 2 === 1) throw new Error('log stream closed');
      return Promise.reject(new Error('log stream closed'));
    };
    const logger = {
      debug: throwing('debug'),
      info: throwing('info'),
      warn: throwing('warn'),
      error: throwing('error'),
    };
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer], { logger });
    await appendEvents(db.sql, 3, undefined, schema);
    await drainUntilIdle(dispatcher);
    expect(c.ids()).toEqual([1n, 3n]);
    expect(calls).toContain('warn'); // it was called, and threw or rejected
    expect(calls.length).toBeGreaterThanOrEqual(2);
    expect(await consumerRow(db.sql, schema, 'logged')).toMatchObject({ cursor: 3n, attempts: 0 });
  });

  test('errorPolicy.isPermanent: a permanent failure uses up every attempt at once, a transient one is retried', async () => {
    class Refused extends Error {
      readonly permanent: boolean;
      constructor(permanent: boolean) {
        super(permanent ? '550 mailbox does not exist' : '451 try again later');
        this.permanent = permanent;
      }
    }
    const calls: bigint[] = [];
    let transientLeft = 1;
    const mailer = recordingConsumer('mailer', {
      errorPolicy: {
        maxAttempts: 5,
        skipApplyErrors: true,
        isPermanent: (error) => error instanceof Refused && error.permanent,
      },
      handler: (event) => {
        calls.push(event.id);
        if (event.id === 2n) throw new Refused(true);
        if (event.id === 3n && transientLeft-- > 0) throw new Refused(false);
      },
    });
    // Without skipApplyErrors a permanent failure makes the consumer dead on its first attempt; a
    // predicate that throws says "not permanent".
    const strict = failingOn('strict', (e) => e.id === 2n, {
      errorPolicy: { maxAttempts: 5, isPermanent: () => true },
    });
    const unsure = failingOn('unsure', (e) => e.id === 2n, {
      errorPolicy: {
        maxAttempts: 5,
        isPermanent: () => {
          throw new Error('cannot tell');
        },
      },
    });
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [
      mailer.consumer,
      strict.consumer,
      unsure.consumer,
    ]);
    await appendEvents(db.sql, 4, undefined, schema);
    await drainUntilIdle(dispatcher);

    expect(calls).toEqual([1n, 2n, 3n, 3n, 4n]); // 2 once, 3 again after its transient failure
    const letters = await db.sql<{ consumer_name: string; event_id: string; attempts: number }[]>`
      select consumer_name, event_id::text, attempts from ${db.sql(`${schema}.dead_letters`)}`;
    expect(letters).toEqual([{ consumer_name: 'mailer', event_id: '2', attempts: 5 }]);
    expect(await consumerRow(db.sql, schema, 'strict')).toMatchObject({
      status: 'dead',
      attempts: 5,
      cursor: 1n,
      stuckEventId: 2n,
    });
    expect(strict.failures.get(2n)).toBe(1);
    expect(await consumerRow(db.sql, schema, 'unsure')).toMatchObject({ status: 'dead', attempts: 5 });
    expect(unsure.failures.get(2n)).toBe(5); // every attempt was made
  });

  test('a throwing batchHandler falls back to per-event delivery', async () => {
    const batches: number[] = [];
    const c = recordingConsumer('batchy', {
      batchHandler: (events) => {
        batches.push(events.length);
        throw new Error('bulk index refused');
      },
    });
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer]);
    await appendEvents(db.sql, 5, undefined, schema);
    await drainUntilIdle(dispatcher);
    expect(batches).toEqual([5]);
    expect(c.ids()).toEqual([1n, 2n, 3n, 4n, 5n]);
  });

  test('a batchHandler that succeeds handles the whole batch in one call', async () => {
    const batches: bigint[][] = [];
    const c = recordingConsumer('bulk', {
      batchSize: 3,
      batchHandler: (events) => {
        batches.push(events.map((e) => e.id));
      },
    });
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer]);
    await appendEvents(db.sql, 5, undefined, schema);
    await drainUntilIdle(dispatcher);
    expect(batches).toEqual([
      [1n, 2n, 3n],
      [4n, 5n],
    ]);
    expect(c.ids()).toEqual([]);
  });
});

describe('batch growth', () => {
  test('a consumer that is behind doubles its batch up to maxBatchSize, and a short fetch or a failure resets it', async () => {
    const schema = await freshSchema(db.sql);
    // Sizes of the turns' deliveries: a batchHandler call, or a run of single handler calls.
    const turns: number[] = [];
    let singles = 0;
    let failOn: bigint | undefined;
    const consumer = {
      name: 'catch-up',
      batchSize: 2,
      maxBatchSize: 8,
      batchHandler: (events: readonly EventRecord[]) => {
        if (failOn !== undefined && events.some((e) => e.id === failOn)) throw new Error('batch refused');
        turns.push(events.length);
      },
      handler: (event: EventRecord) => {
        if (event.id === failOn) throw new Error(`event ${event.id} refused`);
        singles += 1;
      },
    };
    const dispatcher = testDispatcher(db.sql, schema, [consumer], { retryDelayMs: 0 });
    await dispatcher.ensureRegistered();
    await appendEvents(db.sql, 30, undefined, schema);
    await drainUntilIdle(dispatcher);
    // 2 + 4 + 8 + 8 + 8 = 30: the last fetch was cut at 8, one more turn found nothing.
    expect(turns).toEqual([2, 4, 8, 8, 8]);

    turns.length = 0;
    await appendEvents(db.sql, 3, undefined, schema); // 31..33
    await drainUntilIdle(dispatcher);
    expect(turns).toEqual([2]); // caught up in between: back to batchSize
    expect(singles).toBe(1); // 33, alone in its turn

    turns.length = 0;
    singles = 0;
    await appendEvents(db.sql, 12, undefined, schema); // 34..45
    failOn = 40n;
    await dispatcher.runOnce(); // 34, 35
    await dispatcher.runOnce(); // 36..39
    await dispatcher.runOnce(); // 40..45 refused as a batch; one by one, 40 fails
    expect(turns).toEqual([2, 4]);
    expect(await consumerRow(db.sql, schema, 'catch-up')).toMatchObject({ cursor: 39n, attempts: 1 });
    failOn = undefined;
    await drainUntilIdle(dispatcher);
    expect(turns).toEqual([2, 4, 2, 4]); // the failure reset the batch: 40, 41, then 42..45
    expect(await consumerRow(db.sql, schema, 'catch-up')).toMatchObject({ cursor: 45n, attempts: 0 });
  });
});

describe('rearm', () => {
  test('re-arms after the cooldown, stays dead after maxRearmCount re-arms without progress, and reports it once', async () => {
    const c = failingOn('flaky', (e) => e.id === 1n, { errorPolicy: { maxAttempts: 1 } });
    const warnings: string[] = [];
    const errors: string[] = [];
    const logger = {
      debug: () => undefined,
      info: () => undefined,
      warn: (_: object, message: string) => warnings.push(message),
      error: (_: object, message: string) => errors.push(message),
    };
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer], {
      rearmCooldownMs: 0,
      maxRearmCount: 2,
      logger,
    });
    await appendEvents(db.sql, 2, undefined, schema);
    await dispatcher.runOnce(); // dead after 1 attempt
    expect((await consumerRow(db.sql, schema, 'flaky')).status).toBe('dead');
    await dispatcher.runOnce(); // re-arm 1, fails again
    await dispatcher.runOnce(); // re-arm 2, fails again
    for (let i = 0; i < 3; i++) await dispatcher.runOnce(); // budget used up
    const row = await consumerRow(db.sql, schema, 'flaky');
    expect(row).toMatchObject({ status: 'dead', rearmCount: 2, cursor: 0n });
    expect(c.failures.get(1n)).toBe(3);
    expect(warnings.filter((m) => m.startsWith('re-arming'))).toHaveLength(2);
    expect(errors.filter((m) => m.includes('used up its automatic re-arms'))).toHaveLength(1);
  });

  test('a dead consumer does not re-arm before its cooldown', async () => {
    const c = failingOn('cooling', () => true, { errorPolicy: { maxAttempts: 1 } });
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer], {
      rearmCooldownMs: 3_600_000,
    });
    await appendEvents(db.sql, 1, undefined, schema);
    for (let i = 0; i < 3; i++) await dispatcher.runOnce();
    expect(await consumerRow(db.sql, schema, 'cooling')).toMatchObject({ status: 'dead', rearmCount: 0 });
    expect(c.failures.get(1n)).toBe(1);
  });

  test('a turn that advances the cursor after a re-arm restores the budget', async () => {
    let failing = true;
    const c = failingOn('recovers', (e) => failing && e.id === 1n, { errorPolicy: { maxAttempts: 1 } });
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer], {
      rearmCooldownMs: 0,
      maxRearmCount: 3,
    });
    await appendEvents(db.sql, 2, undefined, schema);
    await dispatcher.runOnce(); // dead
    await dispatcher.runOnce(); // re-arm 1, dead again
    expect((await consumerRow(db.sql, schema, 'recovers')).rearmCount).toBe(1);
    failing = false; // the outage is over
    await dispatcher.runOnce(); // re-arm 2, delivers 1 and 2
    expect(await consumerRow(db.sql, schema, 'recovers')).toMatchObject({
      status: 'idle',
      cursor: 2n,
      rearmCount: 0,
      attempts: 0,
    });
    expect(c.ids()).toEqual([1n, 2n]);
  });
});

describe('concurrency slots', () => {
  test('with concurrency 2 and 6 slow consumers, never more than 2 turns run at once', async () => {
    const schema = await freshSchema(db.sql);
    let active = 0;
    let maxActive = 0;
    const consumers = Array.from({ length: 6 }, (_, i) =>
      recordingConsumer(`slow-${i}`, {
        handler: async () => {
          active += 1;
          maxActive = Math.max(maxActive, active);
          await new Promise((resolve) => setTimeout(resolve, 20));
          active -= 1;
        },
      }),
    );
    const dispatcher = testDispatcher(
      db.sql,
      schema,
      consumers.map((c) => c.consumer),
      { concurrency: 2 },
    );
    await dispatcher.ensureRegistered();
    await appendEvents(db.sql, 2, undefined, schema);
    const result = await dispatcher.runOnce();
    expect(result.processed).toBe(12);
    expect(maxActive).toBe(2);
  });

  test('a consumer already in a turn (or queued) is not started twice', async () => {
    const schema = await freshSchema(db.sql);
    let active = 0;
    let overlapped = false;
    const handled: bigint[] = [];
    const release = gate();
    const c = recordingConsumer('single', {
      handler: async (event: EventRecord) => {
        active += 1;
        if (active > 1) overlapped = true;
        await release.promise;
        handled.push(event.id);
        active -= 1;
      },
    });
    const dispatcher = testDispatcher(db.sql, schema, [c.consumer], { concurrency: 1 });
    await dispatcher.ensureRegistered();
    await appendEvents(db.sql, 3, undefined, schema);
    const first = dispatcher.runOnce();
    await until(() => active === 1, 5_000, 'the first turn to start');
    const second = dispatcher.runOnce();
    const third = dispatcher.runOnce();
    release.open();
    const results = await Promise.all([first, second, third]);
    expect(overlapped).toBe(false);
    expect(handled).toEqual([1n, 2n, 3n]);
    // Each later caller either joined the running turn or, if its pre-check came after it, found
    // nothing left to do; none ran a turn alongside it (the join itself is unit-tested in slots.test.ts).
    expect(results.reduce((sum, r) => sum + r.processed, 0)).toBeGreaterThanOrEqual(3);
  });

  test.each(['start()', 'runOnce()'])(
    'runOnce() while a turn started by %s is running gets a turn that fetches after the call',
    async (startedBy) => {
      const schema = await freshSchema(db.sql);
      const entered = gate();
      const release = gate();
      const handled: bigint[] = [];
      const held = recordingConsumer('held', {
        handler: async (event: EventRecord) => {
          if (event.id === 1n) {
            entered.open();
            await release.promise;
          }
          handled.push(event.id);
        },
      });
      // Off until the second call: its handler then runs in that call's pass, which has already
      // found 'held' (listed first) in its turn, so the running turn is released only after that.
      let secondCall = false;
      const marker = recordingConsumer('marker', {
        featureName: 'marker',
        handler: () => {
          release.open();
        },
      });
      const dispatcher = testDispatcher(db.sql, schema, [held.consumer, marker.consumer], {
        pollIntervalMs: 3_600_000,
        isFeatureEnabled: () => secondCall,
      });
      onTestFinished(() => dispatcher.stop());
      await dispatcher.ensureRegistered();
      await appendEvents(db.sql, 1, undefined, schema);
      const first = startedBy === 'start()' ? dispatcher.start() : dispatcher.runOnce();
      await entered.promise;
      // Committed while the running turn delivers the batch it fetched before.
      await appendEvents(db.sql, 1, undefined, schema);
      secondCall = true;
      const second = await dispatcher.runOnce();
      await first;
      expect(handled).toEqual([1n, 2n]);
      expect(second.byConsumer['held']).toMatchObject({ processed: 2, behind: false });
    },
  );
});

describe('lifecycle', () => {
  test('runOnce() before start() or ensureRegistered() throws a typed error', async () => {
    const schema = await freshSchema(db.sql);
    const dispatcher = testDispatcher(db.sql, schema, [recordingConsumer('early').consumer]);
    await expect(dispatcher.runOnce()).rejects.toBeInstanceOf(DispatcherNotRegisteredError);
    await expect(dispatcher.runOnce()).rejects.toMatchObject({ code: 'SLUICE_NOT_REGISTERED' });
  });

  test('a stopped dispatcher cannot start or run again: a typed error, even with events waiting', async () => {
    const once = recordingConsumer('once');
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [once.consumer]);
    await dispatcher.start();
    await dispatcher.stop();
    await appendEvents(db.sql, 1, undefined, schema);
    await expect(dispatcher.start()).rejects.toBeInstanceOf(DispatcherStoppedError);
    await expect(dispatcher.start()).rejects.toMatchObject({ code: 'SLUICE_DISPATCHER_STOPPED' });
    await expect(dispatcher.runOnce()).rejects.toMatchObject({ code: 'SLUICE_DISPATCHER_STOPPED' });
    await expect(dispatcher.ensureRegistered()).rejects.toMatchObject({ code: 'SLUICE_DISPATCHER_STOPPED' });
    expect(once.ids()).toEqual([]);
  });

  test('from the moment stop() is called, before it has begun to stop: runOnce(), start() and ensureRegistered() are refused', async () => {
    const once = recordingConsumer('once');
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [once.consumer]);
    await dispatcher.start();
    await appendEvents(db.sql, 1, undefined, schema);
    const stopped = dispatcher.stop(); // it first waits for start() to end: nothing has stopped yet
    await expect(dispatcher.runOnce()).rejects.toMatchObject({ code: 'SLUICE_DISPATCHER_STOPPED' });
    await expect(dispatcher.ensureRegistered()).rejects.toMatchObject({ code: 'SLUICE_DISPATCHER_STOPPED' });
    await expect(dispatcher.start()).rejects.toMatchObject({ code: 'SLUICE_DISPATCHER_STOPPED' });
    await stopped;
  });

  test('ensureRegistered() on a schema never migrated: the typed error start() gives', async () => {
    const dispatcher = testDispatcher(db.sql, 'never_migrated_here', [recordingConsumer('c').consumer]);
    await expect(dispatcher.ensureRegistered()).rejects.toMatchObject({
      code: 'SLUICE_SCHEMA_NOT_MIGRATED',
      schema: 'never_migrated_here',
    });
  });

  test('start() refused on a schema never migrated leaves no connection of its own open; once migrated, start() works', async () => {
    const schema = `never_migrated_${Math.random().toString(36).slice(2, 8)}`;
    const instanceId = `refused-${schema}`;
    const dispatcher = testDispatcher(db.sql, schema, [recordingConsumer('c').consumer], { instanceId });
    const sessions = async () =>
      (
        await db.sql<{ n: number }[]>`
          select count(*)::int as n from pg_stat_activity where application_name = ${`sluice:${instanceId}`}`
      )[0]?.n;
    for (let attempt = 0; attempt < 2; attempt++) {
      await expect(dispatcher.start()).rejects.toMatchObject({ code: 'SLUICE_SCHEMA_NOT_MIGRATED' });
      await until(async () => (await sessions()) === 0, 5_000, 'the refused start closes its connections');
    }
    await migrate(db.sql, { schema });
    await dispatcher.start();
    expect(dispatcher.running).toBe(true);
  });

  test("a per-instance consumer's slow handler holds up no other consumer when the heartbeat falls due: the heartbeat skips the row its turn holds", async () => {
    const schema = await freshSchema(db.sql);
    const sql = db.connect({ max: 6 });
    onTestFinished(() => sql.end({ timeout: 1 }));
    const release = gate();
    onTestFinished(() => {
      release.open();
    });
    let slowEntered = false;
    let slowHandled = 0;
    const slow = recordingConsumer('slow-feed', {
      delivery: 'per-instance',
      handler: async () => {
        slowEntered = true;
        await release.promise;
        slowHandled += 1;
      },
    });
    const fast = recordingConsumer('fast');
    const dispatcher = testDispatcher(sql, schema, [slow.consumer, fast.consumer], {
      instanceId: 'pod-1',
      heartbeatIntervalMs: 20,
      pollIntervalMs: 10,
    });
    onTestFinished(() => dispatcher.stop());
    await dispatcher.start();
    await appendEvents(db.sql, 1, undefined, schema);
    await until(() => slowEntered && fast.ids().length === 1, 5_000, 'both consumers to take event 1');
    // The slow turn holds its row; heartbeats fall due at every pass from now on.
    await appendEvents(db.sql, 5, undefined, schema);
    await until(() => fast.ids().length === 6, 5_000, 'the fast consumer to go on while the slow one waits');
    const [seen] = await db.sql<{ at: Date | null }[]>`
      select last_seen_at as at from ${db.sql(`${schema}.consumers`)} where name = 'slow-feed'`;
    expect(seen?.at).not.toBeNull();
    release.open();
    await until(() => slowHandled === 6, 5_000, 'the slow consumer to catch up');
  });

  test('stop() resolves only after the in-flight handler finishes; then the pool ends cleanly', async () => {
    const schema = await freshSchema(db.sql);
    const sql = db.connect({ max: 6 });
    const release = gate();
    const order: string[] = [];
    let entered = false;
    const c = recordingConsumer('graceful', {
      handler: async () => {
        entered = true;
        await release.promise;
        order.push('handler finished');
      },
    });
    const dispatcher = testDispatcher(sql, schema, [c.consumer], { pollIntervalMs: 10 });
    await dispatcher.start();
    await dispatcher.start(); // idempotent
    await appendEvents(db.sql, 1, undefined, schema);
    await until(() => entered, 5_000, 'the handler to start');
    const stopping = dispatcher.stop().then(() => order.push('stop resolved'));
    await new Promise((resolve) => setImmediate(resolve));
    expect(order).toEqual([]);
    release.open();
    await stopping;
    await dispatcher.stop(); // idempotent
    expect(order).toEqual(['handler finished', 'stop resolved']);
    expect((await consumerRow(db.sql, schema, 'graceful')).cursor).toBe(1n);
    await sql.end({ timeout: 1 });
  });

  test.each(['repeatable read', 'serializable'] as const)(
    "a database whose default isolation is %s: Sluice's transactions run at READ COMMITTED, and two dispatchers deliver every event under concurrent appends",
    async (level) => {
      const schema = await freshSchema(db.sql);
      const sql = db.connect({ max: 8, connection: { default_transaction_isolation: level } });
      onTestFinished(() => sql.end({ timeout: 1 }));
      const seen = new Set<bigint>();
      const consumers = ['x', 'y'].map((name) =>
        recordingConsumer(name, {
          handler: (event) => {
            if (name === 'x') seen.add(event.id);
          },
        }),
      );
      const dispatchers = [1, 2].map(() =>
        testDispatcher(
          sql,
          schema,
          consumers.map((c) => c.consumer),
          { pollIntervalMs: 5 },
        ),
      );
      for (const d of dispatchers) await d.start();
      onTestFinished(async () => {
        await Promise.all(dispatchers.map((d) => d.stop()));
      });
      await Promise.all(Array.from({ length: 10 }, () => appendEvents(sql, 30, undefined, schema)));
      await until(() => seen.size === 300, 15_000, 'every event delivered');
      for (const name of ['x', 'y']) {
        await until(
          async () => (await consumerRow(db.sql, schema, name)).cursor === 300n,
          15_000,
          `${name} at the head`,
        );
        expect(await consumerRow(db.sql, schema, name), name).toMatchObject({ failureCategory: null });
      }
      // The application's own transaction() keeps the database's level.
      const [own] = await transaction(
        sql,
        (tx) => tx<{ level: string }[]>`select current_setting('transaction_isolation') as level`,
      );
      expect(own?.level).toBe(level);
    },
  );

  test("turns run on the dispatcher's own connections: an application pool of one connection, held, holds nothing up", async () => {
    const schema = await freshSchema(db.sql);
    const single = db.connect({ max: 1 });
    const held = await single.reserve(); // the application's only connection, busy elsewhere
    onTestFinished(() => {
      held.release();
      return single.end({ timeout: 1 });
    });
    const c = recordingConsumer('independent');
    const dispatcher = testDispatcher(single, schema, [c.consumer], { concurrency: 4 });
    await dispatcher.ensureRegistered();
    await appendEvents(db.sql, 3, undefined, schema);
    await dispatcher.runOnce();
    expect(c.ids()).toEqual([1n, 2n, 3n]);
    const [own] = await db.sql<{ n: number }[]>`
      select count(*)::int as n from pg_stat_activity
      where datname = current_database() and application_name = 'sluice'`;
    expect(own?.n).toBeGreaterThan(0);
  });

  test('a pool of 2 with five consumers whose handlers append through it makes progress (R1a)', async () => {
    const schema = await freshSchema(db.sql);
    const small = db.connect({ max: 2 });
    const seen = Array.from({ length: 5 }, (): bigint[] => []);
    const consumers = Array.from({ length: 5 }, (_, i) =>
      recordingConsumer(`appender-${i}`, {
        handler: async (event) => {
          seen[i]?.push(event.id);
          if (event.type !== 'Root') return;
          await small.begin((tx) =>
            append(tx, [{ streamId: `derived-${i}`, type: 'Derived', data: {} }], { schema }),
          );
        },
      }),
    );
    const dispatcher = testDispatcher(
      small,
      schema,
      consumers.map((c) => c.consumer),
      { concurrency: 4, handlerTimeoutMs: 2_000, statementTimeoutMs: 2_000 },
    );
    await dispatcher.ensureRegistered();
    await appendEvents(db.sql, 3, () => ({ streamId: 'roots', type: 'Root', data: {} }), schema);
    // Four turns at once would each hold one of the two connections and wait for another.
    const results = [];
    for (let pass = 0; pass < 10; pass += 1) results.push(await dispatcher.runOnce());
    const skips = results.flatMap((r) => Object.values(r.byConsumer).map((c) => c.skipped));
    expect(skips).not.toContain('failed');
    expect(results.every((r) => r.failed === 0)).toBe(true);
    // Every event once (I9). Not necessarily in id order: the handlers' appends commit on two
    // connections, so a later id may commit first, and the earlier one is then a late delivery (I2).
    for (const ids of seen)
      expect([...ids].sort((a, b) => (a < b ? -1 : 1))).toEqual(
        Array.from({ length: 18 }, (_, i) => BigInt(i + 1)),
      );
    await small.end({ timeout: 1 });
  });

  test('a turn start not recorded within statementTimeoutMs is an infra failure, not a hang', async () => {
    const seen = recordingConsumer('starved');
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [seen.consumer], {
      statementTimeoutMs: 300,
      backoffInitialMs: 1,
      backoffMaxMs: 1,
    });
    await appendEvents(db.sql, 2, undefined, schema);
    // The database takes longer than statementTimeoutMs to record the start (a slow trigger).
    await db.sql.unsafe(`
      create function "${schema}".slow_start() returns trigger language plpgsql as $$
      begin perform pg_sleep(1); return new; end $$;
      create trigger slow_start before insert on "${schema}".turn_starts
        for each row execute function "${schema}".slow_start();`);
    const starved = await dispatcher.runOnce();
    await db.sql.unsafe(`drop trigger slow_start on "${schema}".turn_starts`);
    expect(starved.byConsumer['starved']?.skipped).toBe('failed');
    expect(seen.ids()).toEqual([]);
    expect(await consumerRow(db.sql, schema, 'starved')).toMatchObject({
      cursor: 0n,
      attempts: 0,
      failureCategory: 'resources',
    });
    expect((await consumerRow(db.sql, schema, 'starved')).lastError).toMatch(/turn start was not recorded/);
    // The late record still commits: the next turns count it as a crash (delivering one event at
    // a time through the batch), and nothing is lost.
    await passUntil(
      dispatcher,
      () => seen.ids().length === 2,
      'delivery once the database answers again',
      5_000,
    );
    expect(seen.ids()).toEqual([1n, 2n]);
  });

  test('ensureRegistered() re-creates rows a test truncated, without moving existing cursors', async () => {
    const a = recordingConsumer('kept');
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [a.consumer]);
    await appendEvents(db.sql, 2, undefined, schema);
    await drainUntilIdle(dispatcher);
    await dispatcher.ensureRegistered();
    expect((await consumerRow(db.sql, schema, 'kept')).cursor).toBe(2n);
    await db.sql`truncate ${db.sql(`${schema}.consumers`)} cascade`;
    await dispatcher.ensureRegistered();
    expect((await consumerRow(db.sql, schema, 'kept')).cursor).toBe(0n);
  });

  test('a pass re-creates a row deleted under it, as at start, and audits it', async () => {
    const a = recordingConsumer('kept');
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [a.consumer]);
    await appendEvents(db.sql, 2, undefined, schema);
    await drainUntilIdle(dispatcher);
    await db.sql`delete from ${db.sql(`${schema}.consumers`)}`;
    await drainUntilIdle(dispatcher);
    expect(a.ids()).toEqual([1n, 2n, 1n, 2n]); // startFrom 'beginning', at least once
    const [audit] = await db.sql<{ action: string; details: { from: string } }[]>`
      select action, details from ${db.sql(`${schema}.audit`)}`;
    expect(audit).toMatchObject({ action: 're-register', details: { from: 'start-from' } });
  });

  test("a pass re-creates a laned consumer's rows deleted under it, and the consumers declared after it go on", async () => {
    const laned = recordingConsumer('laned', { lanes: 3 });
    const after = recordingConsumer('after');
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [laned.consumer, after.consumer]);
    await appendEvents(db.sql, 6, (n) => ({ streamId: `s-${n}`, type: 'Placed', data: {} }), schema);
    await drainUntilIdle(dispatcher);
    await db.sql`delete from ${db.sql(`${schema}.consumers`)} where name = 'laned'`;
    await appendEvents(db.sql, 3, (n) => ({ streamId: `s-${n}`, type: 'Placed', data: {} }), schema);
    await drainUntilIdle(dispatcher);
    expect(after.ids()).toEqual([1n, 2n, 3n, 4n, 5n, 6n, 7n, 8n, 9n]);
    const lanes = await db.sql<{ instance_id: string; cursor: string }[]>`
      select instance_id, cursor::text as cursor from ${db.sql(`${schema}.consumers`)} where name = 'laned' order by 1`;
    expect(lanes.map((l) => [l.instance_id, l.cursor])).toEqual([
      ['*0/3', '9'],
      ['*1/3', '9'],
      ['*2/3', '9'],
    ]);
    // startFrom 'beginning': the six before the delete come again, at least once.
    expect([...laned.ids()].sort((a, b) => Number(a - b))).toEqual([
      1n,
      1n,
      2n,
      2n,
      3n,
      3n,
      4n,
      4n,
      5n,
      5n,
      6n,
      6n,
      7n,
      8n,
      9n,
    ]);
  });

  test('a pass re-creates one lane whose row was deleted while the others run, and its keys are delivered again', async () => {
    const laned = recordingConsumer('laned', { lanes: 3 });
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [laned.consumer]);
    const byKey = (n: number) => ({ streamId: `s-${n}`, type: 'Placed', data: {} });
    await appendEvents(db.sql, 9, byKey, schema);
    await drainUntilIdle(dispatcher);
    await db.sql`delete from ${db.sql(`${schema}.consumers`)} where name = 'laned' and instance_id = '*1/3'`;
    await appendEvents(db.sql, 9, (n) => byKey(n + 9), schema);
    await drainUntilIdle(dispatcher);
    const lanes = await db.sql<{ instance_id: string; cursor: string }[]>`
      select instance_id, cursor::text as cursor from ${db.sql(`${schema}.consumers`)} where name = 'laned' order by 1`;
    expect(lanes.map((l) => [l.instance_id, l.cursor])).toEqual([
      ['*0/3', '18'],
      ['*1/3', '18'],
      ['*2/3', '18'],
    ]);
    // Every event at least once; the re-created lane's keys from the beginning again.
    expect(new Set(laned.ids())).toEqual(new Set(Array.from({ length: 18 }, (_, i) => BigInt(i + 1))));
    const [audit] = await db.sql<{ instance_id: string }[]>`
      select instance_id from ${db.sql(`${schema}.audit`)} where action = 're-register'`;
    expect(audit?.instance_id).toBe('*1/3');
    // A start re-creates it too.
    await db.sql`delete from ${db.sql(`${schema}.consumers`)} where name = 'laned' and instance_id = '*2/3'`;
    await dispatcher.ensureRegistered();
    const [again] = await db.sql<{ cursor: string }[]>`
      select cursor::text as cursor from ${db.sql(`${schema}.consumers`)} where name = 'laned' and instance_id = '*2/3'`;
    expect(again?.cursor).toBe('0');
  });
});

describe('startFrom, feature gate, transactional consumers', () => {
  test("startFrom: 'now' skips history but delivers events that were in flight when it registered", async () => {
    const schema = await freshSchema(db.sql);
    await appendEvents(db.sql, 3, undefined, schema); // 1..3: history
    const inFlight = await heldTransaction(db.sql);
    const [straggler] = await inFlight.append([{ streamId: 's', type: 'InFlight', data: {} }], { schema }); // 4
    await appendEvents(db.sql, 1, undefined, schema); // 5, committed before registration
    const c = recordingConsumer('fresh', { startFrom: 'now' });
    const dispatcher = testDispatcher(db.sql, schema, [c.consumer]);
    await dispatcher.ensureRegistered();
    expect((await consumerRow(db.sql, schema, 'fresh')).cursor).toBe(5n);
    await appendEvents(db.sql, 1, undefined, schema); // 6
    await dispatcher.runOnce();
    expect(c.ids()).toEqual([6n]);
    await inFlight.commit();
    await passUntil(dispatcher, () => c.ids().length === 2, 'the straggler', 10_000);
    expect(c.ids()).toEqual([6n, straggler!.id]);
  });

  test('startFrom never clobbers an existing cursor', async () => {
    const first = recordingConsumer('stable');
    const { schema, dispatcher: d1 } = await registeredDispatcher(db.sql, [first.consumer]);
    await appendEvents(db.sql, 2, undefined, schema);
    await drainUntilIdle(d1);
    await appendEvents(db.sql, 2, undefined, schema);
    const again = recordingConsumer('stable', { startFrom: 'now' });
    const d2 = testDispatcher(db.sql, schema, [again.consumer]);
    await d2.ensureRegistered();
    await drainUntilIdle(d2);
    expect(again.ids()).toEqual([3n, 4n]);
  });

  test('the feature gate makes the cursor wait and then resume with nothing lost', async () => {
    let enabled = false;
    const c = recordingConsumer('gated', { featureName: 'search' });
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer], {
      isFeatureEnabled: (name) => name === 'search' && enabled,
    });
    await appendEvents(db.sql, 3, undefined, schema);
    const off = await dispatcher.runOnce();
    expect(off.byConsumer['gated']?.skipped).toBe('feature-off');
    expect(c.ids()).toEqual([]);
    expect((await consumerRow(db.sql, schema, 'gated')).cursor).toBe(0n);
    enabled = true;
    await drainUntilIdle(dispatcher);
    expect(c.ids()).toEqual([1n, 2n, 3n]);
  });

  test('transactional: writes through ctx.tx commit with the cursor; a failing event’s writes are rolled back', async () => {
    const schema = await freshSchema(db.sql);
    await db.sql`create table ${db.sql(`${schema}.projection`)} (event_id bigint primary key)`;
    const c = recordingConsumer('projection', {
      transactional: true,
      errorPolicy: { maxAttempts: 1 },
      handler: async (event, ctx) => {
        await ctx.tx!`insert into ${ctx.tx!(`${schema}.projection`)} (event_id) values (${event.id.toString()})`;
        if (event.id === 3n) throw new Error('projection rejects 3');
      },
    });
    const dispatcher = testDispatcher(db.sql, schema, [c.consumer], { rearmCooldownMs: 3_600_000 });
    await dispatcher.ensureRegistered();
    await appendEvents(db.sql, 4, undefined, schema);
    await dispatcher.runOnce();
    const rows = await db.sql<
      { event_id: string }[]
    >`select event_id::text from ${db.sql(`${schema}.projection`)} order by 1`;
    expect(rows.map((r) => r.event_id)).toEqual(['1', '2']);
    expect(await consumerRow(db.sql, schema, 'projection')).toMatchObject({ cursor: 2n, status: 'dead' });
  });

  test('transactional: one savepoint for the batch; a failing call rolls it back, the calls before it go again in one savepoint, and it is charged without a second call', async () => {
    const schema = await freshSchema(db.sql);
    await db.sql`create table ${db.sql(`${schema}.projection`)} (event_id bigint primary key)`;
    const statements: string[] = [];
    const sql = db.connect({ max: 6, debug: (_connection, query) => statements.push(query) });
    const calls: bigint[] = [];
    let failOn: bigint | undefined = undefined;
    const c = recordingConsumer('projection', {
      transactional: true,
      handler: async (event, ctx) => {
        calls.push(event.id);
        await ctx.tx!`insert into ${ctx.tx!(`${schema}.projection`)} (event_id) values (${event.id.toString()})`;
        if (event.id === failOn) throw new Error(`projection rejects ${event.id}`);
      },
    });
    const dispatcher = testDispatcher(sql, schema, [c.consumer]);
    await dispatcher.ensureRegistered();
    statements.length = 0; // the turns' statements only (registration inserts in a savepoint)
    const savepoints = () => statements.filter((q) => /^savepoint /i.test(q.trim())).length;
    await appendEvents(db.sql, 5, undefined, schema);
    await dispatcher.runOnce();
    expect(calls).toEqual([1n, 2n, 3n, 4n, 5n]);
    expect(savepoints()).toBe(1);

    statements.length = 0;
    calls.length = 0;
    failOn = 8n;
    await appendEvents(db.sql, 5, undefined, schema); // 6..10
    await dispatcher.runOnce();
    // In one savepoint up to the failure, then 6 and 7 again in one savepoint; 8 is pinned with
    // the attempt it failed, not called again.
    expect(calls).toEqual([6n, 7n, 8n, 6n, 7n]);
    expect(savepoints()).toBe(1 + 1);
    const rows = await db.sql<{ event_id: string }[]>`
      select event_id::text from ${db.sql(`${schema}.projection`)} order by event_id`;
    expect(rows.map((r) => r.event_id)).toEqual(['1', '2', '3', '4', '5', '6', '7']); // each once
    expect(await consumerRow(db.sql, schema, 'projection')).toMatchObject({
      cursor: 7n,
      attempts: 1,
      stuckEventId: 8n,
    });

    // The first event of the batch fails: nothing to deliver again, and it is called once.
    statements.length = 0;
    calls.length = 0;
    await dispatcher.runOnce(); // 8 fails again: attempt 2
    expect(calls).toEqual([8n]);
    expect(await consumerRow(db.sql, schema, 'projection')).toMatchObject({ cursor: 7n, attempts: 2 });
    failOn = undefined;
    calls.length = 0;
    // The event a failure is recorded on goes alone (a transactional turn's timeout would roll back
    // what the events after it did), the rest in the next turn.
    await dispatcher.runOnce();
    expect(calls).toEqual([8n]);
    await dispatcher.runOnce();
    expect(calls).toEqual([8n, 9n, 10n]);
    const all = await db.sql<{ n: number }[]>`
      select count(*)::int as n from ${db.sql(`${schema}.projection`)}`;
    expect(all[0]?.n).toBe(10);
    await sql.end();
  });

  test('a pool with a column transform (postgres.camel): Sluice reads its rows as PostgreSQL names them, and ctx.tx too', async () => {
    const schema = await freshSchema(db.sql);
    const app = db.connect({ max: 4, transform: postgres.camel });
    const plain = recordingConsumer('plain');
    const failing = failingOn('failing', (e) => e.id === 2n, { errorPolicy: { maxAttempts: 2 } });
    const columns: string[][] = [];
    const projected: bigint[] = [];
    const projection = recordingConsumer('projection', {
      transactional: true,
      handler: async (event, ctx) => {
        const [row] = await ctx.tx!`select 1 as some_column`;
        columns.push(Object.keys(row ?? {}));
        projected.push(event.id);
      },
    });
    const dispatcher = testDispatcher(app, schema, [plain.consumer, failing.consumer, projection.consumer]);
    await dispatcher.ensureRegistered();
    await appendEvents(db.sql, 3, undefined, schema);
    for (let pass = 0; pass < 3; pass++) await dispatcher.runOnce();
    expect(plain.ids()).toEqual([1n, 2n, 3n]);
    expect(projected).toEqual([1n, 2n, 3n]);
    expect(columns[0]).toEqual(['some_column']);
    expect(await consumerRow(db.sql, schema, 'failing')).toMatchObject({
      status: 'dead',
      cursor: 1n,
      attempts: 2,
      stuckEventId: 2n,
    });
    await dispatcher.stop();
    await app.end();
  });

  test("transactional: ctx.tx binds and reads arrays as the application's pool does", async () => {
    const schema = await freshSchema(db.sql);
    const app = db.connect({ max: 4 }); // a fresh pool: it fetches array types on its first connection
    const read: unknown[] = [];
    const c = recordingConsumer('arrays', {
      transactional: true,
      handler: async (event, ctx) => {
        const tx = ctx.tx!;
        const [row] = await tx<{ ids: string[]; names: string[]; hit: boolean }[]>`
          select ${[event.id.toString(), '7']}::bigint[]::text[] as ids, array['a', 'b'] as names,
                 ${event.id.toString()}::bigint = any(${[event.id.toString()]}::bigint[]) as hit`;
        read.push(row);
      },
    });
    const dispatcher = testDispatcher(app, schema, [c.consumer]);
    await dispatcher.ensureRegistered();
    await appendEvents(db.sql, 2, undefined, schema);
    await dispatcher.runOnce();
    expect(read).toEqual([
      { ids: ['1', '7'], names: ['a', 'b'], hit: true },
      { ids: ['2', '7'], names: ['a', 'b'], hit: true },
    ]);
    await dispatcher.stop();
    await app.end();
  });

  test('transactional batchHandler that fails: one by one in the batch series, a savepoint per series, not per event', async () => {
    const schema = await freshSchema(db.sql);
    await db.sql`create table ${db.sql(`${schema}.projection`)} (event_id bigint primary key)`;
    const statements: string[] = [];
    const sql = db.connect({ max: 6, debug: (_connection, query) => statements.push(query) });
    const calls: bigint[] = [];
    const write = (ctx: HandlerContext, ids: readonly bigint[]) =>
      ctx.tx!`insert into ${ctx.tx!(`${schema}.projection`)} select unnest(${ids.map(String)}::bigint[])`;
    const c = recordingConsumer('projection', {
      transactional: true,
      batchHandler: async (events, ctx) => {
        await write(
          ctx,
          events.map((e) => e.id),
        );
        throw new Error('the batch fails');
      },
      handler: async (event, ctx) => {
        calls.push(event.id);
        await write(ctx, [event.id]);
        if (event.id === 15n) throw new Error('projection rejects 15');
      },
    });
    const dispatcher = testDispatcher(sql, schema, [c.consumer]);
    await dispatcher.ensureRegistered();
    await appendEvents(db.sql, 20, undefined, schema);
    statements.length = 0;
    await dispatcher.runOnce();
    // The batch call, then 1..15 in one savepoint, then 1..14 again in one: three, whatever the batch.
    expect(statements.filter((q) => /^savepoint /i.test(q.trim())).length).toBe(3);
    expect(calls.filter((id) => id === 15n)).toEqual([15n]);
    expect(await consumerRow(db.sql, schema, 'projection')).toMatchObject({ cursor: 14n, stuckEventId: 15n });
    const [rows] = await db.sql<
      { n: number }[]
    >`select count(*)::int as n from ${db.sql(`${schema}.projection`)}`;
    expect(rows?.n).toBe(14);
    await sql.end();
  });

  test('transactional with skipApplyErrors: the failing event goes to the dead letters and the batch goes on after it, each write once', async () => {
    const schema = await freshSchema(db.sql);
    await db.sql`create table ${db.sql(`${schema}.projection`)} (event_id bigint primary key)`;
    const calls: bigint[] = [];
    const c = recordingConsumer('projection', {
      transactional: true,
      errorPolicy: { maxAttempts: 1, skipApplyErrors: true },
      handler: async (event, ctx) => {
        calls.push(event.id);
        await ctx.tx!`insert into ${ctx.tx!(`${schema}.projection`)} (event_id) values (${event.id.toString()})`;
        if (event.id === 3n) throw new Error('projection rejects 3');
      },
    });
    const dispatcher = testDispatcher(db.sql, schema, [c.consumer]);
    await dispatcher.ensureRegistered();
    await appendEvents(db.sql, 5, undefined, schema);
    await dispatcher.runOnce();
    expect(calls).toEqual([1n, 2n, 3n, 1n, 2n, 4n, 5n]);
    const rows = await db.sql<{ event_id: string }[]>`
      select event_id::text from ${db.sql(`${schema}.projection`)} order by event_id`;
    expect(rows.map((r) => r.event_id)).toEqual(['1', '2', '4', '5']);
    const letters = await db.sql<{ event_id: string }[]>`
      select event_id::text from ${db.sql(`${schema}.dead_letters`)}`;
    expect(letters.map((l) => l.event_id)).toEqual(['3']);
    expect(await consumerRow(db.sql, schema, 'projection')).toMatchObject({ cursor: 5n, attempts: 0 });
  });

  test('transactional: a handler that catches a failed statement of ctx.tx and goes on fails its call (the transaction was aborted); one that caught it in a savepoint of its own succeeds', async () => {
    const schema = await freshSchema(db.sql);
    const projection = db.sql(`${schema}.projection`);
    await db.sql`create table ${projection} (event_id bigint primary key)`;
    await db.sql`insert into ${projection} values (100)`;
    const c = recordingConsumer('swallower', {
      transactional: true,
      errorPolicy: { maxAttempts: 2, skipApplyErrors: true },
      handler: async (event, ctx) => {
        const tx = ctx.tx!;
        const duplicate = () => tx`insert into ${tx(`${schema}.projection`)} values (100)`;
        if (event.id === 2n) {
          await duplicate().catch(() => undefined); // the transaction is aborted: nothing more to do
          return;
        }
        if (event.id === 3n)
          await tx
            .savepoint((sp) => sp`insert into ${sp(`${schema}.projection`)} values (100)`)
            .catch(() => undefined);
        await tx`insert into ${tx(`${schema}.projection`)} (event_id) values (${event.id.toString()}) on conflict do nothing`;
      },
    });
    await atBatchSizes(schema, c.consumer, 4, async (name) => {
      expect(await consumerRow(db.sql, schema, name), name).toMatchObject({ cursor: 4n, attempts: 0 });
      const letters = await db.sql<{ event_id: string; error: string; attempts: number }[]>`
        select event_id::text, error, attempts from ${db.sql(`${schema}.dead_letters`)} where consumer_name = ${name}`;
      expect(letters, name).toEqual([
        {
          event_id: '2',
          error: expect.stringMatching(
            /^a statement of ctx\.tx failed and the handler went on, .*duplicate key/,
          ) as unknown,
          attempts: 2,
        },
      ]);
    });
    const rows = await db.sql<
      { id: string }[]
    >`select event_id::text as id from ${projection} order by event_id`;
    expect(rows.map((r) => r.id)).toEqual(['1', '3', '4', '100']);
  });

  test("transactional: a statement through ctx.tx that would end the turn (COMMIT, END, ROLLBACK, ABORT) is not sent and fails the call; SAVEPOINT and ROLLBACK TO are the handler's", async () => {
    const schema = await freshSchema(db.sql);
    const projection = db.sql(`${schema}.projection`);
    await db.sql`create table ${projection} (consumer text, n bigint)`;
    const c = recordingConsumer('ender', {
      transactional: true,
      errorPolicy: { maxAttempts: 2, skipApplyErrors: true },
      handler: async (event, ctx) => {
        const tx = ctx.tx!;
        const write = (n: bigint) =>
          tx`insert into ${tx(`${schema}.projection`)} values (${ctx.consumer}, ${n.toString()})`;
        if (event.id === 2n) {
          await write(2n);
          await tx`commit`;
        } else if (event.id === 3n) {
          await write(3n);
          await tx.unsafe('-- done here\n  /* really */ END');
        } else if (event.id === 4n) {
          await tx`savepoint mine`;
          await write(4n);
          await tx`rollback to savepoint mine`;
          await write(40n);
        } else if (event.id === 5n) {
          try {
            await tx`Rollback and chain`;
          } catch {
            // refused before it was sent (a throw, as when the transaction is gone): the turn goes on
          }
          await write(5n);
        } else await write(event.id);
      },
    });
    await atBatchSizes(schema, c.consumer, 6, async (name) => {
      expect(await consumerRow(db.sql, schema, name), name).toMatchObject({ cursor: 6n, attempts: 0 });
      const letters = await db.sql<{ event_id: string; error: string }[]>`
        select event_id::text, error from ${db.sql(`${schema}.dead_letters`)}
        where consumer_name = ${name} order by event_id`;
      expect(letters, name).toEqual([
        {
          event_id: '2',
          error: expect.stringMatching(/^a statement that ends the transaction \(COMMIT\)/) as unknown,
        },
        {
          event_id: '3',
          error: expect.stringMatching(/^a statement that ends the transaction \(END\)/) as unknown,
        },
      ]);
      const rows = await db.sql<{ n: string }[]>`
        select n::text from ${projection} where consumer = ${name} order by n::text`;
      expect(
        rows.map((r) => r.n),
        name,
      ).toEqual(['1', '40', '5', '6']);
      await db.sql`delete from ${projection}`;
    });
  });

  test("transactional: a handler's own network call failing with ECONNRESET is the handler's attempt, not the turn's lost connection: its writes are undone and it reaches its dead letter", async () => {
    // A peer that resets every connection: http.get fails with a real ECONNRESET.
    const resetting = createServer((socket) => socket.resetAndDestroy());
    await new Promise<void>((resolve) => resetting.listen(0, '127.0.0.1', resolve));
    onTestFinished(
      () =>
        new Promise<void>((resolve) =>
          resetting.close(() => {
            resolve();
          }),
        ),
    );
    const { port } = resetting.address() as AddressInfo;
    const schema = await freshSchema(db.sql);
    const projection = db.sql(`${schema}.projection`);
    await db.sql`create table ${projection} (consumer text, n bigint)`;
    const calls = new Map<string, number>();
    const c = recordingConsumer('notifier', {
      transactional: true,
      errorPolicy: { maxAttempts: 2, skipApplyErrors: true },
      handler: async (event, ctx) => {
        const tx = ctx.tx!;
        await tx`insert into ${tx(`${schema}.projection`)} values (${ctx.consumer}, ${event.id.toString()})`;
        if (event.id !== 2n) return;
        calls.set(ctx.consumer, (calls.get(ctx.consumer) ?? 0) + 1);
        await new Promise((resolve, reject) => {
          get(`http://127.0.0.1:${port}/`, resolve).on('error', reject);
        });
      },
    });
    await atBatchSizes(schema, c.consumer, 3, async (name) => {
      expect(await consumerRow(db.sql, schema, name), name).toMatchObject({ cursor: 3n, attempts: 0 });
      expect(calls.get(name), name).toBe(2);
      const letters = await db.sql<{ event_id: string; error: string }[]>`
        select event_id::text, error from ${db.sql(`${schema}.dead_letters`)} where consumer_name = ${name}`;
      expect(letters, name).toEqual([
        { event_id: '2', error: expect.stringContaining('ECONNRESET') as unknown },
      ]);
      const rows = await db.sql<{ n: string }[]>`
        select n::text from ${projection} where consumer = ${name} order by n`;
      expect(
        rows.map((r) => r.n),
        name,
      ).toEqual(['1', '3']);
    });
    // No turn was left open on a connection thought lost.
    const open =
      await db.sql`select 1 from pg_stat_activity where state = 'idle in transaction' and datname = current_database()`;
    expect(open).toEqual([]);
  });

  // postgres.js 3 refuses such a statement before sending anything; 4 aborts the transaction it
  // was made in.
  const driverAbortsOnBuildError = postgresJsMajor >= 4;
  test(`transactional: a statement the driver refuses itself (a parameter it cannot serialise), caught by the handler, ${driverAbortsOnBuildError ? 'fails the attempt, saying the transaction was aborted' : 'leaves the transaction usable: the call succeeds'}, in a batch too`, async () => {
    const schema = await freshSchema(db.sql);
    const c = recordingConsumer('careless', {
      transactional: true,
      errorPolicy: { maxAttempts: 2, skipApplyErrors: true },
      handler: async (event, ctx) => {
        // eslint-disable-next-line @typescript-eslint/no-unnecessary-type-assertion -- postgres.js 3's types need it
        if (event.id === 2n) await ctx.tx!`select ${ctx.tx!.json({ n: 1n } as never)}`.catch(() => undefined);
      },
    });
    await atBatchSizes(schema, c.consumer, 3, async (name) => {
      expect(await consumerRow(db.sql, schema, name), name).toMatchObject({ cursor: 3n, attempts: 0 });
      const letters = await db.sql<{ event_id: string; attempts: number; error: string }[]>`
        select event_id::text, attempts, error from ${db.sql(`${schema}.dead_letters`)} where consumer_name = ${name}`;
      expect(letters, name).toEqual(
        driverAbortsOnBuildError
          ? [
              {
                event_id: '2',
                attempts: 2,
                error: expect.stringMatching(
                  /^a statement of ctx\.tx failed and the handler went on, but its transaction had been aborted/,
                ) as unknown,
              },
            ]
          : [],
      );
    });
  });

  test('transactional: when the turn dies before COMMIT, neither the writes nor the cursor survive', async () => {
    const schema = await freshSchema(db.sql);
    await db.sql`create table ${db.sql(`${schema}.projection`)} (event_id bigint primary key)`;
    let pid = 0;
    const proceed = gate();
    const c = recordingConsumer('atomic', {
      transactional: true,
      handler: async (event, ctx) => {
        await ctx.tx!`insert into ${ctx.tx!(`${schema}.projection`)} (event_id) values (${event.id.toString()})`;
        const [row] = await ctx.tx!<{ pid: number }[]>`select pg_backend_pid() as pid`;
        pid = row!.pid;
        await proceed.promise;
      },
    });
    const dispatcher = testDispatcher(db.sql, schema, [c.consumer], { backoffInitialMs: 10 });
    await dispatcher.ensureRegistered();
    await appendEvents(db.sql, 1, undefined, schema);
    const pass = dispatcher.runOnce();
    await until(() => pid !== 0, 5_000, 'the handler to write');
    await db.sql`select pg_terminate_backend(${pid})`;
    proceed.open();
    expect((await pass).byConsumer['atomic']?.skipped).toBe('failed');
    const [count] = await db.sql<
      { n: number }[]
    >`select count(*)::int as n from ${db.sql(`${schema}.projection`)}`;
    expect(count?.n).toBe(0);
    expect((await consumerRow(db.sql, schema, 'atomic')).cursor).toBe(0n);
  });
});

/**
 * Runs `consumer` alone, as `<name>-1` with batches of one event, then as `<name>-10` with batches of
 * ten, each on its own dispatcher draining the schema's log (`events` appended before the first),
 * and calls `check` with each name once it is idle.
 */
async function atBatchSizes(
  schema: string,
  consumer: Consumer,
  events: number,
  check: (name: string) => Promise<void>,
): Promise<void> {
  for (const batchSize of [1, 10]) {
    const name = `${consumer.name}-${batchSize}`;
    const dispatcher = testDispatcher(db.sql, schema, [
      { ...consumer, name, batchSize, maxBatchSize: batchSize },
    ]);
    await dispatcher.ensureRegistered();
    if (batchSize === 1) await appendEvents(db.sql, events, undefined, schema);
    await drainUntilIdle(dispatcher);
    await check(name);
    await dispatcher.stop();
  }
}

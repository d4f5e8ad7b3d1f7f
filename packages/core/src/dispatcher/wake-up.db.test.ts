import {
  appendEvents,
  consumerRow,
  embeddedServer,
  freshSchema,
  listenBackends,
  recordingConsumer,
  until,
} from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import { createNoopMeter, type Meter, type MeterProvider, type MetricOptions } from '@opentelemetry/api';
import postgres from 'postgres';
import { expect, test } from 'vitest';
import { append, transaction } from '../append.js';
import { silentLogger } from '../logger.js';
import { migrate } from '../schema/migrate.js';
import type { Sql } from '../sql-types.js';
import { METRIC } from '../telemetry/attributes.js';
import { wakeUpChannel } from '../wake-up/channel.js';
import { wakeUpNotifierFor } from '../wake-up/wake-up-notifier.js';
import { testDispatcher } from '../test-support.js';
import { EMPTY_NOTIFY_PASSES } from './idle-check.js';

const db = await useTestDatabase();

/** A started dispatcher with one recording consumer, once LISTEN is connected, and its LISTEN backend. */
async function listeningDispatcher(
  name: string,
  options: { listenCheckMs?: number; pollIntervalMs: number },
) {
  const schema = await freshSchema(db.sql);
  const c = recordingConsumer(name);
  const dispatcher = testDispatcher(db.connect({ max: 6 }), schema, [c.consumer], {
    listen: true,
    ...options,
  });
  await dispatcher.start();
  await until(() => dispatcher.listenConnected, 5_000, 'LISTEN');
  const [pid] = await listenBackends(db.sql);
  if (pid === undefined) throw new Error('no LISTEN backend');
  return { schema, c, dispatcher, pid };
}

/** Waits until the LISTEN backend's last statement is an idle tick's question. */
async function untilTickOnListen(pid: number): Promise<void> {
  await until(
    async () => {
      const [row] = await db.sql<{ query: string }[]>`select query from pg_stat_activity where pid = ${pid}`;
      return row?.query.trim() === 'select pg_current_snapshot()::text as snapshot';
    },
    5_000,
    'an idle tick on the LISTEN connection',
  );
}

/** A meter provider that counts the dispatcher's passes and drops every other measurement. */
function passCounter() {
  const counter = { count: 0, meterProvider: undefined as unknown as MeterProvider };
  const noop = createNoopMeter();
  const meter: Meter = Object.assign(Object.create(noop) as Meter, {
    createCounter: (name: string, options?: MetricOptions) =>
      name === METRIC.passes
        ? {
            add: () => {
              counter.count += 1;
            },
          }
        : noop.createCounter(name, options),
  });
  counter.meterProvider = { getMeter: () => meter };
  return counter;
}

test('an append committed in another process is handled without waiting for the poll', async () => {
  const { schema, c } = await listeningDispatcher('prompt', { pollIntervalMs: 60_000 });
  await until(
    async () => (await consumerRow(db.sql, schema, 'prompt')).cursor === 0n,
    5_000,
    'the first pass',
  );
  // Another process: its own pool, so only the after-commit NOTIFY can wake our dispatcher.
  const otherProcess = db.connect({ max: 2 });
  const started = Date.now();
  await transaction(otherProcess, (tx) =>
    append(tx, [{ streamId: 's', type: 'Woke', data: {} }], { schema }),
  );
  await until(() => c.ids().length === 1, 5_000, 'the NOTIFY to wake the dispatcher');
  expect(Date.now() - started).toBeLessThan(5_000); // far below the 60 s poll
});

test('an append committed while the consumer is in a turn is handled when that turn ends, not at the next poll', async () => {
  const schema = await freshSchema(db.sql);
  const seen: string[] = [];
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  let inFirstHandler!: () => void;
  const firstHandlerRunning = new Promise<void>((resolve) => (inFirstHandler = resolve));
  const passes = passCounter();
  const sql = db.connect({ max: 6 });
  const dispatcher = testDispatcher(
    sql,
    schema,
    [
      {
        name: 'busy',
        handler: async (event) => {
          seen.push(event.type);
          if (event.type === 'First') {
            inFirstHandler();
            await held;
          }
        },
      },
    ],
    { pollIntervalMs: 60_000, meterProvider: passes.meterProvider },
  );
  await dispatcher.start();
  // The same pool: each append wakes the dispatcher directly, and the only poll is 60 s away.
  await transaction(sql, (tx) => append(tx, [{ streamId: 's', type: 'First', data: {} }], { schema }));
  await firstHandlerRunning;
  const passesBefore = passes.count;
  // The running turn fetched before this commit: the pass it wakes finds that turn still running.
  await transaction(sql, (tx) => append(tx, [{ streamId: 's', type: 'Second', data: {} }], { schema }));
  // The woken pass has found the turn running once it has counted itself (the last thing it does).
  await until(() => passes.count > passesBefore, 5_000, 'the pass the second append woke');
  release();
  await until(() => seen.length === 2, 5_000, 'the second event before the 60 s poll');
  expect(seen).toEqual(['First', 'Second']);
});

test('with its LISTEN connection terminated, polling still delivers and the connected state drops and recovers', async () => {
  const { schema, c, dispatcher, pid } = await listeningDispatcher('resilient', { pollIntervalMs: 50 });
  expect(pid).toBeDefined();

  let sawDisconnected = false;
  const watching = (async () => {
    const deadline = Date.now() + 5_000;
    while (Date.now() < deadline && !sawDisconnected) {
      if (!dispatcher.listenConnected) sawDisconnected = true;
      await new Promise((resolve) => setImmediate(resolve));
    }
  })();
  await db.sql`select pg_terminate_backend(${pid})`;
  await appendEvents(db.sql, 3, undefined, schema); // plain commits: no NOTIFY, polling must find them
  await watching;
  expect(sawDisconnected).toBe(true);
  await until(() => c.ids().length === 3, 5_000, 'polling to deliver');
  await until(() => dispatcher.listenConnected, 5_000, 'LISTEN to reconnect');
  const after = await listenBackends(db.sql);
  expect(after).toHaveLength(1); // one listener, never duplicated
  expect(after[0]).not.toBe(pid);
});

test('a forged NOTIFY costs at most a pass: nothing phantom is delivered, no cursor moves', async () => {
  const schema = await freshSchema(db.sql);
  const c = recordingConsumer('skeptic');
  const dispatcher = testDispatcher(db.connect({ max: 6 }), schema, [c.consumer], {
    listen: true,
    pollIntervalMs: 60_000,
  });
  await dispatcher.start();
  await until(() => dispatcher.listenConnected, 5_000, 'LISTEN');
  for (const payload of ['{"id": 9007199254740993}', "x'; drop table events;--", 'z'.repeat(7_000)]) {
    await db.sql`select pg_notify(${wakeUpChannel(schema)}, ${payload})`;
  }
  await dispatcher.drain();
  expect(c.ids()).toEqual([]);
  expect((await consumerRow(db.sql, schema, 'skeptic')).cursor).toBe(0n);
});

test('a LISTEN backend that stops answering without closing its socket is detected by the check and replaced', async (context) => {
  const { schema, c, dispatcher, pid } = await listeningDispatcher('blackholed', {
    listenCheckMs: 200,
    pollIntervalMs: 60_000,
  });
  try {
    // A frozen backend (SIGSTOP) keeps its socket open and answers nothing, like a silent network drop.
    process.kill(pid, 'SIGSTOP');
  } catch {
    context.skip('the PostgreSQL server is not on this machine (or not ours to signal)');
  }
  try {
    await until(() => !dispatcher.listenConnected, 5_000, 'the check to notice the silent LISTEN connection');
    await until(
      async () => dispatcher.listenConnected && (await listenBackends(db.sql)).some((p) => p !== pid),
      10_000,
      'a new LISTEN connection',
    );
    await transaction(db.connect({ max: 1 }), (tx) =>
      append(tx, [{ streamId: 's', type: 'Woke', data: {} }], { schema }),
    );
    await until(() => c.ids().length === 1, 5_000, 'the NOTIFY on the new connection to wake the dispatcher');
  } finally {
    process.kill(pid, 'SIGCONT');
    await db.sql`select pg_terminate_backend(${pid})`;
    await dispatcher.stop();
  }
});

test("idle ticks ask the LISTEN connection for the cluster's snapshot, not a pooled connection", async () => {
  const { schema, c, dispatcher, pid } = await listeningDispatcher('still', {
    listenCheckMs: 60_000,
    pollIntervalMs: 20,
  });
  try {
    // Until now that backend has only run LISTEN; the ticks of an idle dispatcher come to it.
    await untilTickOnListen(pid);
    await appendEvents(db.sql, 1, undefined, schema);
    await until(() => c.ids().length === 1, 5_000, 'the event');
  } finally {
    await dispatcher.stop();
  }
});

test('a LISTEN backend that hangs does not hold up the idle ticks: they ask the pool and keep delivering', async (context) => {
  // The check that would replace the frozen connection does not run during the test.
  const { schema, c, dispatcher, pid } = await listeningDispatcher('unheld', {
    listenCheckMs: 60_000,
    pollIntervalMs: 50,
  });
  await untilTickOnListen(pid);
  try {
    process.kill(pid, 'SIGSTOP');
  } catch {
    await dispatcher.stop();
    context.skip('the PostgreSQL server is not on this machine (or not ours to signal)');
  }
  try {
    // Its NOTIFY goes to the frozen backend: only a tick can find this event.
    await transaction(db.connect({ max: 1 }), (tx) =>
      append(tx, [{ streamId: 's', type: 'Polled', data: {} }], { schema }),
    );
    // A tick asks the pool after one poll interval: well within this bound, which only leaves room
    // for a loaded machine (the postgres.js 3 run of one CI missed 5 s).
    await until(() => c.ids().length === 1, 15_000, 'a tick to deliver the event with LISTEN frozen');
    expect(dispatcher.listenConnected).toBe(true);
  } finally {
    process.kill(pid, 'SIGCONT');
    await db.sql`select pg_terminate_backend(${pid})`;
    await dispatcher.stop();
  }
});

/**
 * A dispatcher (LISTEN only if asked) with no timer pass in the window (one poll a minute), on a
 * pool whose statements are recorded, and the consumer row's xmin (it changes when the row is written).
 */
async function recordedDispatcher(consumers: ReturnType<typeof recordingConsumer>[], listen = false) {
  const schema = await freshSchema(db.sql);
  const statements: string[] = [];
  const sql = db.connect({ max: 6, debug: (_connection, query) => statements.push(query) });
  const dispatcher = testDispatcher(
    sql,
    schema,
    consumers.map((c) => c.consumer),
    { pollIntervalMs: 60_000, listen },
  );
  const xmin = async (name: string) => {
    const [row] = await db.sql<{ xmin: string }[]>`
      select xmin::text from ${db.sql(`${schema}.consumers`)} where name = ${name}`;
    return row?.xmin;
  };
  return { schema, sql, dispatcher, statements, xmin };
}

const isPrecheck = (query: string) => query.includes(' as quiet');
const isLock = (query: string) => /for update/i.test(query);
const isSnapshotTick = (query: string) => query.trim() === 'select pg_current_snapshot()::text as snapshot';

test('a pass woken by a commit in this process skips the pre-check while the last one found every consumer plain', async () => {
  const a = recordingConsumer('plain-a');
  const b = recordingConsumer('plain-b');
  const { schema, sql, dispatcher, statements } = await recordedDispatcher([a, b]);
  await dispatcher.start(); // its first pass reads the pre-check: both consumers caught up
  await dispatcher.drain();
  expect(statements.filter(isPrecheck)).toHaveLength(1);

  statements.length = 0;
  await transaction(sql, (tx) => append(tx, [{ streamId: 's', type: 'T', data: { n: 1 } }], { schema }));
  await until(() => a.ids().length === 1 && b.ids().length === 1, 5_000, 'both deliveries');
  await dispatcher.drain();
  expect(statements.filter(isPrecheck)).toHaveLength(0);
  expect(statements.filter(isLock)).toHaveLength(2); // one turn each, the fetch sent with the lock
});

test('ticks that find the cluster unchanged keep a plain pre-check fresh: a local wake-up after a quiet spell skips it too', async () => {
  // A server of its own, nothing else writing to it: on the shared one, other tests' commits change
  // the cluster's snapshot, and every tick reads the pre-check in full anyway.
  const server = await embeddedServer({ settings: { autovacuum: 'off' } });
  const statements: { at: number; query: string }[] = [];
  const sql = postgres(server.url, {
    max: 6,
    onnotice: () => undefined,
    debug: (_connection, query) => statements.push({ at: performance.now(), query }),
  }) as unknown as Sql;
  const pollIntervalMs = 500;
  const c = recordingConsumer('quiet');
  const dispatcher = testDispatcher(sql, 'sluice', [c.consumer], { pollIntervalMs });
  try {
    await migrate(sql, { logger: silentLogger });
    await dispatcher.start(); // its first pass reads the pre-check in full: caught up
    await dispatcher.drain();
    const full = statements.filter((s) => isPrecheck(s.query));
    expect(full).toHaveLength(1);
    const readAt = (full[0] as { at: number }).at;
    // A tick sent when that reading is more than a poll interval old, and its pass done.
    await until(
      () => statements.some((s) => isSnapshotTick(s.query) && s.at > readAt + pollIntervalMs),
      10_000,
      'a tick a poll interval after the pre-check',
    );
    await dispatcher.drain();
    expect(statements.filter((s) => isPrecheck(s.query))).toHaveLength(1); // the ticks only asked

    const from = statements.length;
    await transaction(sql, (tx) => append(tx, [{ streamId: 's', type: 'T', data: { n: 1 } }]));
    await until(() => c.ids().length === 1, 5_000, 'the delivery');
    // Up to the turn's lock: what the woken pass sent (a later tick reads in full, the cursor moved).
    const woken = statements.slice(from).map((s) => s.query);
    const lockAt = woken.findIndex(isLock);
    expect(lockAt).toBeGreaterThanOrEqual(0);
    expect(woken.slice(0, lockAt).filter(isPrecheck)).toEqual([]);
  } finally {
    await dispatcher.stop();
    await sql.end();
    await server.stop();
  }
});

test('a pass woken by NOTIFY skips the pre-check too, until NOTIFYs keep waking passes for nothing: anyone may send one', async () => {
  const c = recordingConsumer('notified');
  const { schema, sql, dispatcher, statements } = await recordedDispatcher([c], true);
  await dispatcher.start();
  await until(() => dispatcher.listenConnected, 5_000, 'LISTEN');
  await dispatcher.drain();
  // Every consumer plain, the last pre-check fresh: a wake-up may skip the next one.
  await transaction(sql, (tx) => append(tx, [{ streamId: 's', type: 'T', data: { n: 1 } }], { schema }));
  await until(() => c.ids().length === 1, 5_000, 'the delivery');
  await dispatcher.drain();

  const notify = async (payload: string) => {
    const before = statements.length;
    await db.sql`select pg_notify(${wakeUpChannel(schema)}, ${payload})`;
    // The pass shows as its first statement: the pre-check, or its turn's lock.
    await until(() => statements.length > before, 5_000, `a pass after NOTIFY ${payload}`);
    await dispatcher.drain();
  };
  statements.length = 0;
  await appendEvents(db.sql, 1, undefined, schema); // outside transaction(): no wake-up of its own
  await notify('from elsewhere');
  await until(() => c.ids().length === 2, 5_000, 'the delivery after the NOTIFY');
  expect(statements.filter(isPrecheck)).toHaveLength(0);
  // Forged NOTIFYs, no event: each launches a turn that finds nothing, up to EMPTY_NOTIFY_PASSES…
  for (let i = 0; i < EMPTY_NOTIFY_PASSES; i++) await notify(`forged ${i}`);
  expect(statements.filter(isPrecheck)).toHaveLength(0);
  // …then a NOTIFY costs a lock-free pre-check, until a turn delivers again.
  await notify('forged once too often');
  expect(statements.filter(isPrecheck)).toHaveLength(1);
  await appendEvents(db.sql, 1, undefined, schema);
  await notify('a real one');
  await until(() => c.ids().length === 3, 5_000, 'the delivery after it');
  statements.length = 0;
  await appendEvents(db.sql, 1, undefined, schema);
  await notify('after a delivery');
  await until(() => c.ids().length === 4, 5_000, 'the next delivery');
  expect(statements.filter(isPrecheck)).toHaveLength(0);
});

test('a woken pass reads the pre-check when a consumer is not plain (here: a failed attempt)', async () => {
  const failing = recordingConsumer('not-plain', {
    handler: () => {
      throw new Error('not yet');
    },
  });
  const { schema, sql, dispatcher, statements } = await recordedDispatcher([failing]);
  await dispatcher.start();
  await dispatcher.drain();
  await transaction(sql, (tx) => append(tx, [{ streamId: 's', type: 'T', data: { n: 1 } }], { schema }));
  await until(async () => (await consumerRow(db.sql, schema, 'not-plain')).attempts > 0, 5_000, 'a failure');
  await dispatcher.drain();

  statements.length = 0;
  wakeUpNotifierFor(sql, schema).poke();
  await dispatcher.drain();
  expect(statements.filter(isPrecheck)).toHaveLength(1);
});

test('a turn that finds nothing to deliver or record writes nothing', async () => {
  const c = recordingConsumer('caught-up');
  const { schema, sql, dispatcher, statements, xmin } = await recordedDispatcher([c]);
  await dispatcher.start();
  await transaction(sql, (tx) => append(tx, [{ streamId: 's', type: 'T', data: { n: 1 } }], { schema }));
  await until(() => c.ids().length === 1, 5_000, 'the delivery');
  await dispatcher.drain();
  const before = await xmin('caught-up');

  // A wake-up for what was already delivered (as a late, coalesced NOTIFY would be).
  statements.length = 0;
  wakeUpNotifierFor(sql, schema).poke();
  await dispatcher.drain();
  expect(statements.filter(isLock)).toHaveLength(1); // the turn ran
  expect(statements.filter((q) => /^\s*update/i.test(q))).toEqual([]);
  expect(await xmin('caught-up')).toBe(before);
  expect(c.ids()).toHaveLength(1);
});

// Sluice's own pool (docs/design.md §4.11): replaced when a connection dies, but not churned by the
// application's idle_timeout or max_lifetime, which postgres.js 3.4.9 reports as closes too.
import {
  appendEvents,
  consumerRow,
  failingOn,
  freshSchema,
  postgresJsMajor,
  recordingConsumer,
  until,
} from '@sluice/testing';
import { silentLogger } from '../logger.js';
import { migrate } from '../schema/migrate.js';
import type { TransactionSql } from '../sql-types.js';
import { append, transaction } from '../append.js';
import { testDispatcher } from '../test-support.js';
import { randomBytes } from 'node:crypto';
import { registeredDispatcher, setDatabaseSettings, useTestDatabase } from '@sluice/testing/vitest';
import { expect, onTestFinished, test } from 'vitest';
import { openOwnConnections } from './own-connections.js';

const db = await useTestDatabase();

function ownPool(template = db.sql) {
  const applicationName = `sluice-own-${randomBytes(4).toString('hex')}`;
  const own = openOwnConnections(template, { max: 2, applicationName, retireAfterMs: 10_000 });
  onTestFinished(() => own.end());
  return { own, applicationName };
}

/** Backends of `applicationName`, by pid. */
async function backendsOf(applicationName: string): Promise<number[]> {
  const rows = await db.sql<{ pid: number }[]>`
    select pid from pg_stat_activity where application_name = ${applicationName} order by pid`;
  return rows.map((r) => r.pid);
}

async function isGone(pid: number): Promise<boolean> {
  const [row] = await db.sql<
    { n: number }[]
  >`select count(*)::int as n from pg_stat_activity where pid = ${pid}`;
  return row?.n === 0;
}

test("the application's idle_timeout closes no connection while Sluice works on the pool, and never counts as a replacement", async () => {
  // The application's pool, with a one-second idle_timeout: its own idle close is what the test
  // waits for, to know that the same timeout would have expired on Sluice's idle connection.
  const template = db.connect({ max: 1, idle_timeout: 1 });
  const { own, applicationName } = ownPool(template);

  // Connection A runs a statement that waits on an advisory lock the test holds; B answers once.
  const lockKey = Math.floor(Math.random() * 1_000_000);
  const holder = await db.sql.reserve();
  onTestFinished(() => {
    holder.release();
  });
  await holder`select pg_advisory_lock(${lockKey})`;
  const running = own.sql`select pg_advisory_lock(${lockKey}), pg_advisory_unlock(${lockKey})`.then(
    () => undefined,
  );
  await until(async () => (await backendsOf(applicationName)).length === 1, 10_000, 'connection A');
  const [b] = await own.sql<{ pid: number }[]>`select pg_backend_pid() as pid`;
  const [app] = await template<{ pid: number }[]>`select pg_backend_pid() as pid`;

  // B was idle first: once the application's connection has idled out, so would B have.
  await until(() => isGone(app!.pid), 15_000, "the application's connection to idle out");
  const during = await backendsOf(applicationName);
  expect(during).toContain(b!.pid);
  expect(during).toHaveLength(2);
  expect({ replacements: own.replacements, renewals: own.renewals }).toEqual({
    replacements: 0,
    renewals: 0,
  });

  // Nothing of Sluice's runs on it any more: after idle_timeout the pool is renewed (its
  // connections end), as the application asked, without a replacement.
  await holder`select pg_advisory_unlock(${lockKey})`;
  await running;
  await until(async () => (await backendsOf(applicationName)).length === 0, 15_000, 'the idle pool to end');
  expect({ replacements: own.replacements, renewals: own.renewals }).toEqual({
    replacements: 0,
    renewals: 1,
  });
  const [again] = await own.sql<{ pid: number }[]>`select pg_backend_pid() as pid`;
  expect(again!.pid).not.toBe(b!.pid);
});

test('a connection that dies replaces the pool; the next statement runs on a fresh one', async () => {
  const { own, applicationName } = ownPool(db.connect({ max: 1, idle_timeout: 60 }));
  const [first] = await own.sql<{ pid: number }[]>`select pg_backend_pid() as pid`;
  await db.sql`select pg_terminate_backend(${first!.pid})`;
  await until(() => own.replacements === 1, 10_000, 'the replacement');
  const [next] = await own.sql<{ pid: number }[]>`select pg_backend_pid() as pid`;
  expect(next!.pid).not.toBe(first!.pid);
  expect(await backendsOf(applicationName)).toEqual([next!.pid]);
  expect(own.renewals).toBe(0);
});

test("a database whose DateStyle is not ISO ('SQL, DMY'): start is refused, saying how to keep the date order; with ISO set on the pool, retries and createdAt go as on any server", async () => {
  await setDatabaseSettings(db, { datestyle: 'SQL, DMY', timezone: 'America/New_York' });
  const c = failingOn('mailer', (e) => e.id === 2n, { errorPolicy: { maxAttempts: 3 } });
  // Read as 'SQL, DMY', a failure's time was a day-and-month swap or an Invalid Date, and the
  // retry waited for ever.
  const plain = db.connect({ max: 2 });
  onTestFinished(() => plain.end());
  expect(await plain`show datestyle`).toEqual([{ DateStyle: 'SQL, DMY' }]);
  const refused = testDispatcher(plain, await freshSchema(db.sql), [c.consumer]);
  const error = await refused.start().then(
    () => undefined,
    (e: unknown) => e,
  );
  await refused.stop();
  expect(error).toMatchObject({
    code: 'SLUICE_POSTGRES_UNSUPPORTED',
    setting: { name: 'DateStyle', value: 'SQL, DMY' },
  });
  expect((error as Error).message).toContain("connection: { DateStyle: 'ISO, DMY' }");

  const app = db.connect({ max: 2, connection: { DateStyle: 'ISO, DMY' } });
  onTestFinished(() => app.end());
  const { schema, dispatcher } = await registeredDispatcher(app, [c.consumer], {
    rearmCooldownMs: 3_600_000,
  });
  await appendEvents(app, 2, undefined, schema);
  // Each pass retries at once (the test dispatcher's retry delay is 1 ms).
  for (const attempts of [1, 2]) {
    await dispatcher.runOnce();
    expect(await consumerRow(db.sql, schema, 'mailer')).toMatchObject({ attempts, status: 'processing' });
  }
  await dispatcher.runOnce();
  expect(await consumerRow(db.sql, schema, 'mailer')).toMatchObject({ attempts: 3, status: 'dead' });
  const [stored] = await db.sql<{ ms: number }[]>`
    select extract(epoch from created_at)::float8 * 1000 as ms from ${db.sql(`${schema}.events`)} where id = 1`;
  expect(Math.abs((c.seen[0]?.createdAt.getTime() ?? 0) - (stored?.ms ?? Infinity))).toBeLessThan(1);
});

test("a pool whose types read timestamptz and JSON as text: Sluice's rows read as on any pool, and events carry a Date and parsed data", async () => {
  const asText = (x: string) => x;
  const app = db.connect({
    max: 2,
    types: {
      date: { to: 1184, from: [1082, 1114, 1184], serialize: (x: unknown) => x, parse: asText },
      json: { to: 114, from: [114, 3802], serialize: (x: unknown) => JSON.stringify(x), parse: asText },
    },
  });
  onTestFinished(() => app.end());
  expect(typeof (await app<{ now: unknown }[]>`select now()`)[0]?.now).toBe('string');
  const c = failingOn('mailer', (e) => e.id === 2n, { errorPolicy: { maxAttempts: 3 } });
  const { schema, dispatcher } = await registeredDispatcher(app, [c.consumer], {
    rearmCooldownMs: 3_600_000,
  });
  const [first] = await transaction(app, (tx: TransactionSql) =>
    append(tx, [{ streamId: 's', type: 't', data: {} }], { schema }),
  );
  expect(first?.createdAt).toBeInstanceOf(Date);
  await appendEvents(app, 1, undefined, schema);
  // Read as text, JSON stopped the start ("keys.find is not a function"), and the row's times
  // broke every turn after a failure ("now.getTime is not a function"): retried for ever as an
  // infrastructure failure.
  for (const attempts of [1, 2, 3]) {
    await dispatcher.runOnce();
    expect(await consumerRow(db.sql, schema, 'mailer')).toMatchObject({
      attempts,
      failureCategory: 'handler',
    });
  }
  expect((await consumerRow(db.sql, schema, 'mailer')).status).toBe('dead');
  expect(c.seen[0]?.createdAt).toBeInstanceOf(Date);
  expect(c.seen[0]?.data).toEqual({});
  expect(c.seen[0]?.createdAt.getTime()).toBe(first?.createdAt.getTime());
});

test('standard_conforming_strings off: migrate() and start() work; array_nulls off: start() is refused, naming it', async () => {
  await setDatabaseSettings(db, { standard_conforming_strings: 'off' });
  const legacy = db.connect({ max: 2 });
  onTestFinished(() => legacy.end());
  const schema = `scs_${randomBytes(4).toString('hex')}`;
  // The xid guard's check read its pattern's backslashes as escapes: "parentheses () not balanced".
  await migrate(legacy, { schema, logger: silentLogger });
  const c = recordingConsumer('mailer');
  const dispatcher = testDispatcher(legacy, schema, [c.consumer]);
  await dispatcher.start();
  await appendEvents(legacy, 1, undefined, schema);
  await until(() => c.seen.length === 1, 10_000, 'the event delivered');
  await dispatcher.stop();

  await setDatabaseSettings(db, { array_nulls: 'off' });
  const noNulls = db.connect({ max: 2 });
  onTestFinished(() => noNulls.end());
  const refused = testDispatcher(noNulls, schema, [c.consumer]);
  const error = await refused.ensureRegistered().then(
    () => undefined,
    (e: unknown) => e,
  );
  await refused.stop();
  expect(error).toMatchObject({
    code: 'SLUICE_POSTGRES_UNSUPPORTED',
    setting: { name: 'array_nulls', value: 'off' },
  });
});

test("a pool with a type given by name (postgres.js 4) and a query_timeout: Sluice's connections open, and a statement of ctx.tx may outlive query_timeout", async () => {
  await db.sql`do $$ begin create type mood as enum ('happy', 'sad'); exception when duplicate_object then null; end $$`;
  const app = db.connect({
    max: 2,
    query_timeout: 1,
    types: {
      mood: {
        to: 'mood',
        from: ['mood'],
        serialize: (x: string) => x,
        parse: (x: string) => x.toUpperCase(),
      },
    },
  } as never);
  onTestFinished(() => app.end());
  if (postgresJsMajor >= 4) expect(await app`select 'happy'::mood as m`).toEqual([{ m: 'HAPPY' }]);
  const slept: number[] = [];
  const c = recordingConsumer('projection', {
    transactional: true,
    handler: async (_event, ctx) => {
      await ctx.tx!`select pg_sleep(1.2)`;
      slept.push(1);
    },
  });
  // postgres.js 4 refused Sluice's pools (TYPE_NOT_FOUND: they do not fetch types), and its
  // query_timeout cut the handler's statement (and a start waiting behind a prune's lock).
  const { schema, dispatcher } = await registeredDispatcher(app, [c.consumer]);
  await appendEvents(app, 1, undefined, schema);
  await dispatcher.runOnce();
  expect(slept).toEqual([1]);
  expect((await consumerRow(db.sql, schema, 'projection')).cursor).toBe(1n);
});

test("a transactional handler that SETs the session's DateStyle through ctx.tx: later turns on that connection still read times as ISO", async () => {
  const setter = recordingConsumer('a-setter', {
    transactional: true,
    handler: async (_event, ctx) => {
      await ctx.tx!.unsafe("set DateStyle = 'SQL, DMY'");
    },
  });
  const reader = recordingConsumer('b-reader', { transactional: true });
  // One turn at a time: both consumers' turns run on the connection the first handler changed.
  const { schema, dispatcher } = await registeredDispatcher(db.sql, [setter.consumer, reader.consumer], {
    concurrency: 1,
  });
  await appendEvents(db.sql, 3, undefined, schema);
  for (let i = 0; i < 3; i++) await dispatcher.runOnce();
  expect(reader.ids()).toEqual([1n, 2n, 3n]);
  const [now] = await db.sql<{ ms: number }[]>`select extract(epoch from now())::float8 * 1000 as ms`;
  // Read as 'SQL, DMY', they were a day-and-month swap (or, on a 13th or later, Invalid Dates).
  for (const event of reader.seen) {
    expect(Math.abs(event.createdAt.getTime() - (now?.ms ?? 0))).toBeLessThan(60_000);
  }
});

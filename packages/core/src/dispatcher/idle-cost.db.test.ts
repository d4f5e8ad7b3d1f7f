// docs/design.md §4.1: consumers with nothing to do cost one lock-free pre-check per pass — no transaction
// per consumer, no row lock, no WAL — even while a long transaction holds their gaps open.
//
// Counting commits with pg_stat_database needs care: a backend reports its statistics at most once
// a second, and an idle one holds them back for up to 10 s. So every session that did work in the
// database is ended before the count is read (a backend flushes its statistics when it exits), the
// count is read only once no other session is connected, and this file never touches the shared
// `db.sql` pool.
import {
  appendEvents,
  freshSchema,
  openTransaction,
  recordingConsumer,
  until,
  withDatabase,
} from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import postgres from 'postgres';
import { afterAll, expect, onTestFinished, test } from 'vitest';
import type { Sql } from '../sql-types.js';
import { testDispatcher } from '../test-support.js';

const db = await useTestDatabase();
// Statistics are read from another database, so reading them does not add to the count.
const observer = postgres(withDatabase(db.url, 'postgres'), { max: 1, onnotice: () => undefined });
afterAll(() => observer.end());

async function xactCommit(): Promise<number> {
  const [row] = await observer<{ n: string }[]>`
    select xact_commit::text as n from pg_stat_database where datname = ${db.name}`;
  return Number(row?.n);
}

/** Waits until the counter has been still for 1.5 s (the reporting interval is 1 s). */
async function settledXactCommit(): Promise<number> {
  let value = await xactCommit();
  let since = Date.now();
  await until(
    async () => {
      const now = await xactCommit();
      if (now !== value) {
        value = now;
        since = Date.now();
      }
      return Date.now() - since >= 1_500;
    },
    20_000,
    'statistics to settle',
  );
  return value;
}

async function rowLocks(sql: Sql, schema: string) {
  return sql<
    { name: string; xmax: string }[]
  >`select name, xmax::text from ${sql(`${schema}.consumers`)} order by name`;
}

/** Waits until no session is connected to the test database but the `expected` backends. */
async function onlyConnected(expected: readonly number[], what: string): Promise<void> {
  await until(
    async () => {
      const [row] = await observer<{ n: number }[]>`
        select count(*)::int as n from pg_stat_activity
        where datname = ${db.name} and not (pid = any(${expected as number[]}::int[]))`;
      return row?.n === 0;
    },
    20_000,
    what,
  );
}

async function backendPid(sql: Sql): Promise<number> {
  const [row] = await sql<{ pid: number }[]>`select pg_backend_pid() as pid`;
  return row?.pid ?? Number.NaN;
}

const names = (prefix: string) =>
  Array.from({ length: 50 }, (_, i) => `${prefix}-${String(i).padStart(2, '0')}`);

interface Warm {
  schema: string;
  /** The backend holding the long transaction, if any: it stays connected while passes are measured. */
  holderPids: number[];
}

/**
 * The commits one pass of a fresh dispatcher adds to the database, its result and the row locks.
 * The dispatcher runs on connections of its own, which stay connected from its registration to its
 * stop() (their statistics are flushed when they exit): so the registration alone is measured
 * first, by another dispatcher, and taken off.
 */
async function measureOnePass({ schema, holderPids }: Warm, consumerNames: readonly string[]) {
  // The application's pool: a fresh one-connection pool, ended at the end so that its statistics
  // are flushed.
  const sql = db.connect({ max: 1, fetch_types: false });
  onTestFinished(() => sql.end());
  const pid = await backendPid(sql);
  const locksBefore = await rowLocks(sql, schema);
  await sql`select pg_stat_force_next_flush()`; // flushed as soon as the statement has committed
  const dispatcherOf = () =>
    testDispatcher(
      sql,
      schema,
      consumerNames.map((name) => recordingConsumer(name).consumer),
    );
  // Earlier sessions (the warm-up's, an earlier measurement's) may take a moment to exit.
  await onlyConnected([pid, ...holderPids], 'earlier sessions to exit');
  const start = await settledXactCommit();
  const registering = dispatcherOf();
  await registering.ensureRegistered();
  await registering.stop();
  await onlyConnected([pid, ...holderPids], 'the registering sessions to exit');
  const registered = await settledXactCommit();
  const dispatcher = dispatcherOf();
  await dispatcher.ensureRegistered();
  const result = await dispatcher.runOnce();
  await dispatcher.stop();
  await sql.end();
  await onlyConnected(holderPids, 'the measured sessions to exit');
  const after = await settledXactCommit();
  // Read through a pool of its own, ended at once: a later measurement waits for it to exit.
  const reader = db.connect({ max: 1 });
  try {
    return {
      result,
      commits: after - registered - (registered - start),
      locksBefore,
      locksAfter: await rowLocks(reader, schema),
    };
  } finally {
    await reader.end();
  }
}

/**
 * Up to three measured passes, until one adds at most 2 commits: a session this file does not
 * control (an autovacuum worker visits every database once per autovacuum_naptime) can commit in
 * the same database while a pass is measured. A pass that commits more does so every time.
 */
async function measureIdlePass(warm: Warm, consumerNames: readonly string[]) {
  const counts: number[] = [];
  for (;;) {
    const measured = await measureOnePass(warm, consumerNames);
    counts.push(measured.commits);
    if (measured.commits <= 2 || counts.length === 3) return { ...measured, counts };
  }
}

async function warmUp(consumerNames: readonly string[], holdGap: boolean): Promise<Warm> {
  const setup = db.connect({ max: 6 });
  const schema = await freshSchema(setup, 'idle');
  const dispatcher = testDispatcher(
    setup,
    schema,
    consumerNames.map((name) => recordingConsumer(name).consumer),
  );
  await dispatcher.ensureRegistered();
  await appendEvents(setup, 3, undefined, schema);
  const holderPids: number[] = [];
  if (holdGap) {
    const holderPool = db.connect({ max: 1 });
    holderPids.push(await backendPid(holderPool));
    await holderPool`select pg_stat_force_next_flush()`;
    const longTransaction = await openTransaction(holderPool);
    onTestFinished(async () => {
      await longTransaction.rollback();
      await holderPool.end();
    });
    await longTransaction.append([{ streamId: 'held', type: 'Held', data: {} }], { schema }); // held open
    await appendEvents(setup, 1, undefined, schema); // committed above it: a gap for everyone
  }
  // Deliver everything, observe the hole, fence it, record what it waits on.
  await until(
    async () => Object.values((await dispatcher.runOnce()).byConsumer).every((c) => c.skipped === 'idle'),
    15_000,
    'every consumer to be provably idle',
  );
  await dispatcher.stop();
  await setup.end(); // its sessions exit, flushing their statistics
  return { schema, holderPids };
}

test.for([
  { held: true, title: 'with gaps held open by a long transaction', prefix: 'held', pendingGaps: 1 },
  { held: false, title: 'at the head', prefix: 'calm', pendingGaps: 0 },
])(
  '50 idle consumers $title: one pass adds at most 2 commits and no row lock',
  { timeout: 60_000 },
  async ({ held, prefix, pendingGaps }) => {
    const consumerNames = names(prefix);
    const warm = await warmUp(consumerNames, held);
    const { result, counts, locksBefore, locksAfter } = await measureIdlePass(warm, consumerNames);
    expect(
      Object.values(result.byConsumer).every((c) => c.skipped === 'idle' && c.pendingGaps === pendingGaps),
    ).toBe(true);
    expect(Math.min(...counts), `commits of each measured pass: ${counts.join(', ')}`).toBeLessThanOrEqual(2);
    expect(locksAfter).toEqual(locksBefore);
  },
);

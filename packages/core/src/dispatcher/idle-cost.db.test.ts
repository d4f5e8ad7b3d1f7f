// DESIGN §4.1: consumers with nothing to do cost one lock-free pre-check per pass — no transaction
// per consumer, no row lock, no WAL — even while a long transaction holds their gaps open.
//
// Counting commits with pg_stat_database needs care: a backend reports its statistics at most once
// a second, and an idle one holds them back for up to 10 s. So every session that did work before
// the measured pass is either ended (its statistics are flushed when it exits) or forced to flush,
// and this file never touches the shared `db.sql` pool.
import { randomBytes } from 'node:crypto';
import {
  appendEvents,
  openTransaction,
  recordingConsumer,
  useTestDatabase,
  withDatabase,
} from '@sluice/testing';
import postgres from 'postgres';
import { afterAll, expect, onTestFinished, test } from 'vitest';
import { silentLogger } from '../logger.js';
import { migrate } from '../schema/migrate.js';
import type { Sql } from '../sql-types.js';
import { testDispatcher, until } from '../test-support.js';

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

const names = (prefix: string) =>
  Array.from({ length: 50 }, (_, i) => `${prefix}-${String(i).padStart(2, '0')}`);

async function measureOnePass(schema: string, consumerNames: readonly string[]) {
  // A fresh one-connection pool: its only earlier work is flushed by pg_stat_force_next_flush().
  const sql = db.connect({ max: 1, fetch_types: false });
  onTestFinished(() => sql.end());
  // Idle passes deliver nothing, so no turn start is recorded: one connection is enough here.
  const dispatcher = testDispatcher(
    sql,
    schema,
    consumerNames.map((name) => recordingConsumer(name).consumer),
    { countCrashedAttempts: false },
  );
  await dispatcher.ensureRegistered();
  await sql`select pg_stat_force_next_flush()`;
  const locksBefore = await rowLocks(sql, schema);
  await sql`select pg_stat_force_next_flush()`;
  const before = await settledXactCommit();
  const result = await dispatcher.runOnce();
  const after = await settledXactCommit();
  return {
    result,
    commits: after - before,
    locksBefore,
    locksAfter: await rowLocks(throwawayPool(), schema),
  };
}

function throwawayPool(): Sql {
  // Row locks are read through a throwaway pool closed right away (it is not measured any more).
  const sql = db.connect({ max: 1 });
  onTestFinished(() => sql.end());
  return sql;
}

async function warmUp(consumerNames: readonly string[], holdGap: boolean) {
  const setup = db.connect({ max: 6 });
  const schema = `idle_${randomBytes(4).toString('hex')}`;
  await migrate(setup, { schema, logger: silentLogger });
  const dispatcher = testDispatcher(
    setup,
    schema,
    consumerNames.map((name) => recordingConsumer(name).consumer),
  );
  await dispatcher.ensureRegistered();
  await appendEvents(setup, 3, undefined, schema);
  if (holdGap) {
    const holderPool = db.connect({ max: 1 });
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
  return schema;
}

test('50 idle consumers with gaps held open by a long transaction: one pass adds at most 2 commits and no row lock', async () => {
  const consumerNames = names('held');
  const schema = await warmUp(consumerNames, true);
  const { result, commits, locksBefore, locksAfter } = await measureOnePass(schema, consumerNames);
  expect(Object.values(result.byConsumer).every((c) => c.skipped === 'idle' && c.pendingGaps === 1)).toBe(
    true,
  );
  expect(commits).toBeLessThanOrEqual(2);
  expect(locksAfter).toEqual(locksBefore);
});

test('50 idle consumers at the head: one pass adds at most 2 commits and no row lock', async () => {
  const consumerNames = names('calm');
  const schema = await warmUp(consumerNames, false);
  const { result, commits, locksBefore, locksAfter } = await measureOnePass(schema, consumerNames);
  expect(Object.values(result.byConsumer).every((c) => c.skipped === 'idle' && c.pendingGaps === 0)).toBe(
    true,
  );
  expect(commits).toBeLessThanOrEqual(2);
  expect(locksAfter).toEqual(locksBefore);
});

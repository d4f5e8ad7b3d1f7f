// docs/design.md §4.3: a turn holds the cluster's horizon while its handlers run, so it is bounded in time
// (maxTurnMs) as well as in events, and every handler call is bounded (handlerTimeoutMs).
import { appendEvents, consumerRow, drainUntilIdle, freshSchema, recordingConsumer } from '@sluice/testing';
import { registeredDispatcher, useTestDatabase } from '@sluice/testing/vitest';
import { expect, test } from 'vitest';
import { testDispatcher } from '../test-support.js';

const db = await useTestDatabase();

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
    handlerTimeoutMs: 100,
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

// Consumers of one dispatcher at the same cursor share full batches (dispatcher/shared-reads.ts):
// every event still reaches every consumer once, holes passed in a shared batch become each
// consumer's own pending ranges, and the late event is delivered to each.
import { appendEvents, holdGap, recordingConsumer, useTestDatabase } from '@sluice/testing';
import { expect, test } from 'vitest';
import { consumerRow, freshSchema, rangesOf, spans, testDispatcher } from '../test-support.js';

const db = await useTestDatabase();

/** A pool that counts the turns' lock and fetch statements it sends. */
function countingPool() {
  const counts = { locks: 0, fetches: 0 };
  const sql = db.connect({
    max: 6,
    debug: (_connection, query) => {
      if (query.includes('skip locked')) counts.locks += 1;
      if (query.includes('pg_current_snapshot() as snap')) counts.fetches += 1;
    },
  });
  return { sql, counts };
}

test('consumers turning one after another from the same cursor deliver every event once, reading each full batch once', async () => {
  const schema = await freshSchema(db);
  const consumers = ['a', 'b', 'c'].map((name) => recordingConsumer(name));
  await appendEvents(db.sql, 40, undefined, schema);
  const { sql, counts } = countingPool();
  // One slot: turns run one after another, so each later consumer finds the first one's batch.
  const dispatcher = testDispatcher(
    sql,
    schema,
    consumers.map((c) => c.consumer),
    { concurrency: 1, batchSize: 10, maxBatchSize: 10 },
  );
  await dispatcher.ensureRegistered();
  while ((await dispatcher.runOnce()).processed > 0);

  const all = consumers[0]?.ids() ?? [];
  expect(all).toHaveLength(40);
  for (const c of consumers) expect(c.ids()).toEqual(all);
  // Four full batches of 10, read once each; the last, short fetch of every consumer is its own.
  expect(counts.fetches).toBeLessThan(counts.locks);
  expect(counts.fetches).toBeLessThanOrEqual(4 + 3 * 2);
});

test('a hole inside a shared batch becomes a pending range of each consumer, and its late event reaches each', async () => {
  const schema = await freshSchema(db);
  const fast = recordingConsumer('fast');
  const strict = recordingConsumer('strict', { ordering: 'strict' });
  const other = recordingConsumer('other');
  await appendEvents(db.sql, 5, undefined, schema);
  const held = await holdGap(db.sql, undefined, { schema });
  await appendEvents(db.sql, 6, undefined, schema);
  const { sql, counts } = countingPool();
  const dispatcher = testDispatcher(sql, schema, [fast.consumer, other.consumer, strict.consumer], {
    concurrency: 1,
    batchSize: 4,
    maxBatchSize: 4,
  });
  await dispatcher.ensureRegistered();
  for (let i = 0; i < 6; i++) await dispatcher.runOnce();
  expect(counts.fetches).toBeLessThan(counts.locks);

  const committed = (
    await db.sql<{ id: string }[]>`
    select e.id::text as id from ${db.sql(schema)}.events e order by e.id`
  ).map((r) => BigInt(r.id));
  expect(committed).toHaveLength(11);
  for (const c of [fast, other]) {
    expect(c.ids()).toEqual(committed);
    expect(spans(await rangesOf(db.sql, schema, c.consumer.name))).toEqual([[held.id, held.id]]);
  }
  // Strict ordering stops at the hole, shared batch or not.
  expect(strict.ids()).toEqual(committed.filter((id) => id < held.id));
  expect((await consumerRow(db.sql, schema, 'strict')).cursor).toBe(held.id - 1n);

  await held.release({ commit: true });
  for (let i = 0; i < 3; i++) await dispatcher.runOnce();
  for (const c of [fast, other]) {
    expect(c.ids()).toEqual([...committed, held.id]);
    expect(await rangesOf(db.sql, schema, c.consumer.name)).toEqual([]);
  }
  expect(strict.ids()).toEqual([...committed, held.id].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0)));
});

test('a short batch is not shared: the next consumer reads for itself and sees what committed in between', async () => {
  const schema = await freshSchema(db);
  await appendEvents(db.sql, 3, undefined, schema);
  const first = recordingConsumer('first');
  const second = recordingConsumer('second');
  let appended = false;
  const appendsOnce = {
    ...first.consumer,
    handler: async (...args: Parameters<typeof first.consumer.handler>) => {
      await first.consumer.handler(...args);
      if (first.ids().length === 3 && !appended) {
        appended = true;
        await appendEvents(db.sql, 1, undefined, schema);
      }
    },
  };
  const dispatcher = testDispatcher(db.connect({ max: 6 }), schema, [appendsOnce, second.consumer], {
    concurrency: 1,
    batchSize: 10,
  });
  await dispatcher.ensureRegistered();
  await dispatcher.runOnce();
  expect(first.ids()).toHaveLength(3);
  // 'second' turned from the same cursor after 'first', within the same pass.
  expect(second.ids()).toHaveLength(4);
});

test('a consumer catching up alone takes the batch read ahead during its previous turn, holes included', async () => {
  const schema = await freshSchema(db);
  const c = recordingConsumer('alone');
  await appendEvents(db.sql, 5, undefined, schema);
  const held = await holdGap(db.sql, undefined, { schema });
  await appendEvents(db.sql, 10, undefined, schema);
  // Turns whose transaction ran no fetch of its own: they took the read-ahead.
  let turnsWithoutFetch = 0;
  const inTurn = new Map<number, boolean>();
  const sql = db.connect({
    max: 6,
    debug: (connection, query) => {
      const text = query.trim();
      if (text === 'begin') inTurn.set(connection, false);
      else if (text.includes('pg_current_snapshot() as snap') && inTurn.has(connection))
        inTurn.set(connection, true);
      else if (text === 'commit') {
        if (inTurn.get(connection) === false) turnsWithoutFetch += 1;
        inTurn.delete(connection);
      }
    },
  });
  const dispatcher = testDispatcher(sql, schema, [c.consumer], { batchSize: 4, maxBatchSize: 4 });
  await dispatcher.ensureRegistered();
  for (let i = 0; i < 6; i++) await dispatcher.runOnce();
  expect(turnsWithoutFetch).toBeGreaterThan(0);

  const committed = (
    await db.sql<{ id: string }[]>`
    select e.id::text as id from ${db.sql(schema)}.events e order by e.id`
  ).map((r) => BigInt(r.id));
  expect(committed).toHaveLength(15);
  expect(c.ids()).toEqual(committed);
  expect(spans(await rangesOf(db.sql, schema, 'alone'))).toEqual([[held.id, held.id]]);
  await held.release({ commit: true });
  for (let i = 0; i < 2; i++) await dispatcher.runOnce();
  expect(c.ids()).toEqual([...committed, held.id]);
  expect(await rangesOf(db.sql, schema, 'alone')).toEqual([]);
});

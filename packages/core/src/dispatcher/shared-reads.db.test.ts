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
  // The cursors fetched from, and whether inside a turn's transaction.
  const fetches: { cursor: string; inTurn: boolean }[] = [];
  const inTurn = new Set<number>();
  const sql = db.connect({
    max: 6,
    debug: (connection, query, parameters) => {
      const text = query.trim();
      if (text === 'begin') inTurn.add(connection);
      else if (text === 'commit') inTurn.delete(connection);
      else if (text.includes('pg_current_snapshot() as snap'))
        fetches.push({ cursor: String(parameters[0]), inTurn: inTurn.has(connection) });
    },
  });
  const dispatcher = testDispatcher(sql, schema, [c.consumer], { batchSize: 4, maxBatchSize: 4 });
  await dispatcher.ensureRegistered();
  for (let i = 0; i < 6; i++) await dispatcher.runOnce();
  // While the first turn delivered 1..4, the batch above 4 (5, 7, 8, 9: the hole 6 is held open)
  // was read outside it; the second turn delivered that batch without fetching it again.
  expect(fetches.filter((f) => f.cursor === '4')).toEqual([{ cursor: '4', inTurn: false }]);

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

test('a turn whose cursor moved since the pre-check drops the fetch it sent with its lock', async () => {
  const schema = await freshSchema(db);
  await appendEvents(db.sql, 6, undefined, schema);
  const byA: bigint[] = [];
  const byB: bigint[] = [];
  // Another instance of the shared consumer 'y'.
  const b = testDispatcher(db.connect({ max: 4 }), schema, [
    { name: 'y', handler: (event) => void byB.push(event.id) },
  ]);
  await b.ensureRegistered();
  // 'x' starts at 3 (so its reads are not from y's cursor) and, on its first event, lets the other
  // instance move y from 0 to 6: after this pass's pre-check read 0, before y's turn locks its row.
  const early = testDispatcher(db.connect({ max: 4 }), schema, [{ name: 'x', handler: () => undefined }], {
    batchSize: 3,
    maxBatchSize: 3,
  });
  await early.ensureRegistered();
  await early.runOnce();
  let moved = false;
  const a = testDispatcher(
    db.connect({ max: 6 }),
    schema,
    [
      {
        name: 'x',
        handler: async () => {
          if (moved) return;
          moved = true;
          await b.runOnce();
        },
      },
      { name: 'y', handler: (event) => void byA.push(event.id) },
    ],
    { concurrency: 1 },
  );
  await a.ensureRegistered();
  await a.runOnce();
  expect(byB).toHaveLength(6);
  expect(byA).toEqual([]);
  expect((await consumerRow(db.sql, schema, 'y')).cursor).toBe(byB[5]);
});

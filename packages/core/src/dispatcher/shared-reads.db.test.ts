// Consumers of one dispatcher at the same cursor share full batches without holes
// (dispatcher/shared-reads.ts): every event still reaches every consumer once, and a batch with a
// hole is never taken by a turn that could have seen the hole's event committed.
import { appendEvents, consumerRow, freshSchema, holdGap, recordingConsumer } from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import { expect, test } from 'vitest';
import { rangesOf, spans, testDispatcher } from '../test-support.js';

const db = await useTestDatabase();

/** Whether `query` is the turn's fetch (queries/events.ts fetchBatch); its first parameter is the cursor. */
const isFetch = (query: string) => query.includes('order by u.id limit');

/** A pool that counts the turns' lock and fetch statements it sends, and the cursors fetched from. */
function countingPool() {
  const counts = { locks: 0, fetches: 0 };
  const fetchedFrom: string[] = [];
  const sql = db.connect({
    max: 6,
    debug: (_connection, query, parameters) => {
      if (query.includes('skip locked')) counts.locks += 1;
      if (isFetch(query)) {
        counts.fetches += 1;
        fetchedFrom.push(String(parameters[0]));
      }
    },
  });
  return { sql, counts, fetchedFrom };
}

/** The ids in the log, ascending. */
async function committedIds(schema: string): Promise<bigint[]> {
  const rows = await db.sql<{ id: string }[]>`
    select e.id::text as id from ${db.sql(schema)}.events e order by e.id`;
  return rows.map((r) => BigInt(r.id));
}

test('consumers turning one after another from the same cursor deliver every event once, reading each full batch once', async () => {
  const schema = await freshSchema(db.sql);
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

test('a batch with a hole is not shared: a consumer turning after the hole committed delivers it in id order', async () => {
  const schema = await freshSchema(db.sql);
  await appendEvents(db.sql, 4, undefined, schema);
  const held = await holdGap(db.sql, undefined, { schema });
  await appendEvents(db.sql, 6, undefined, schema);
  const first = recordingConsumer('first');
  const second = recordingConsumer('second');
  // 'first' reads 1..4, then 5..8 with the hole 5 held open; on the first event above the hole it
  // commits the hole's writer, before 'second' turns from the same cursor in the same pass.
  const commitsHole = {
    ...first.consumer,
    handler: async (...args: Parameters<typeof first.consumer.handler>) => {
      await first.consumer.handler(...args);
      if (args[0].id === held.id + 1n) await held.release({ commit: true });
    },
  };
  const { sql, fetchedFrom } = countingPool();
  const dispatcher = testDispatcher(sql, schema, [commitsHole, second.consumer], {
    concurrency: 1,
    batchSize: 4,
    maxBatchSize: 4,
  });
  await dispatcher.ensureRegistered();
  for (let i = 0; i < 5; i++) await dispatcher.runOnce();
  // The gapless batch 1..4 was read once for both consumers; the one above 4 by each for itself.
  expect(fetchedFrom.filter((c) => c === '0')).toHaveLength(1);
  expect(fetchedFrom.filter((c) => c === '4')).toHaveLength(2);

  const committed = await committedIds(schema);
  expect(committed).toHaveLength(11);
  // 'first' passed the hole and got its event late; 'second' read after the commit, in id order.
  expect(first.ids()).toHaveLength(11);
  expect(first.ids().indexOf(held.id)).toBeGreaterThan(first.ids().indexOf(held.id + 1n));
  expect(second.ids()).toEqual(committed);
  for (const name of ['first', 'second']) expect(await rangesOf(db.sql, schema, name)).toEqual([]);
});

test('a short batch is not shared: the next consumer reads for itself and sees what committed in between', async () => {
  const schema = await freshSchema(db.sql);
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

/** Runs one consumer alone (a free turn slot: read-ahead on) and records each fetch's cursor. */
async function catchUpAlone(schema: string, passes: number) {
  const c = recordingConsumer('alone');
  // The cursors fetched from, and whether inside a turn's transaction.
  const fetches: { cursor: string; inTurn: boolean }[] = [];
  const inTurn = new Set<number>();
  const sql = db.connect({
    max: 6,
    debug: (connection, query, parameters) => {
      const text = query.trim();
      if (text.startsWith('begin')) inTurn.add(connection);
      else if (text === 'commit') inTurn.delete(connection);
      else if (isFetch(text)) fetches.push({ cursor: String(parameters[0]), inTurn: inTurn.has(connection) });
    },
  });
  const dispatcher = testDispatcher(sql, schema, [c.consumer], { batchSize: 4, maxBatchSize: 4 });
  await dispatcher.ensureRegistered();
  for (let i = 0; i < passes; i++) await dispatcher.runOnce();
  return { c, dispatcher, fromFour: fetches.filter((f) => f.cursor === '4') };
}

test('a consumer catching up alone takes the batch read ahead during its previous turn', async () => {
  const schema = await freshSchema(db.sql);
  await appendEvents(db.sql, 14, undefined, schema);
  const { c, fromFour } = await catchUpAlone(schema, 5);
  // While the first turn delivered 1..4, the batch above 4 was read outside it; the second turn
  // delivered that batch without fetching it again.
  expect(fromFour).toEqual([{ cursor: '4', inTurn: false }]);
  expect(c.ids()).toEqual(Array.from({ length: 14 }, (_, i) => BigInt(i + 1)));
});

test('a batch read ahead with a hole in it is not used: the next turn fetches for itself', async () => {
  const schema = await freshSchema(db.sql);
  await appendEvents(db.sql, 5, undefined, schema);
  const held = await holdGap(db.sql, undefined, { schema });
  await appendEvents(db.sql, 10, undefined, schema);
  const { c, dispatcher, fromFour } = await catchUpAlone(schema, 6);
  // Read ahead above 4 (5, 7, 8, 9: the hole 6 is held open), then again by the turn itself.
  expect(fromFour).toEqual([
    { cursor: '4', inTurn: false },
    { cursor: '4', inTurn: true },
  ]);

  const committed = await committedIds(schema);
  expect(committed).toHaveLength(15);
  expect(c.ids()).toEqual(committed);
  expect(spans(await rangesOf(db.sql, schema, 'alone'))).toEqual([[held.id, held.id]]);
  await held.release({ commit: true });
  for (let i = 0; i < 2; i++) await dispatcher.runOnce();
  expect(c.ids()).toEqual([...committed, held.id]);
  expect(await rangesOf(db.sql, schema, 'alone')).toEqual([]);
});

test('a turn whose cursor moved since the pre-check drops the fetch it sent with its lock', async () => {
  const schema = await freshSchema(db.sql);
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

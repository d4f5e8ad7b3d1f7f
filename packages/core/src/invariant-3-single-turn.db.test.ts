// Invariant I3 (docs/design.md §9): a shared consumer never has two instances in a turn at once and, absent
// crashes, delivers each event once; per-instance consumers see every event in every process.
import { freshSchema, until } from '@sluice/testing';
import { append } from './append.js';
import { useTestDatabase } from '@sluice/testing/vitest';
import { expect, test } from 'vitest';
import type { Consumer } from './consumers/consumer.js';
import type { EventRecord } from './events.js';
import { testDispatcher } from './test-support.js';

const db = await useTestDatabase();

test('two dispatchers on separate pools: shared handled once, never concurrently; per-instance everywhere', async () => {
  const schema = await freshSchema(db.sql);
  const EVENTS = 300;
  let active = 0;
  let maxActive = 0;
  const shared = new Map<bigint, number>();
  const perInstance = { a: [] as bigint[], b: [] as bigint[] };

  const sharedConsumer = (): Consumer => ({
    name: 'projection',
    batchSize: 7,
    handler: async (event: EventRecord) => {
      active += 1;
      maxActive = Math.max(maxActive, active);
      await new Promise((resolve) => setImmediate(resolve)); // let the other dispatcher try to run
      shared.set(event.id, (shared.get(event.id) ?? 0) + 1);
      active -= 1;
    },
  });
  const feed = (instance: 'a' | 'b'): Consumer => ({
    name: 'live-feed',
    delivery: 'per-instance',
    handler: (event: EventRecord) => {
      perInstance[instance].push(event.id);
    },
  });

  const poolA = db.connect({ max: 6 });
  const poolB = db.connect({ max: 6 });
  const a = testDispatcher(poolA, schema, [sharedConsumer(), feed('a')], {
    instanceId: 'a',
    pollIntervalMs: 5,
  });
  const b = testDispatcher(poolB, schema, [sharedConsumer(), feed('b')], {
    instanceId: 'b',
    pollIntervalMs: 5,
  });
  await Promise.all([a.start(), b.start()]);

  const writer = db.connect({ max: 4 });
  for (let batch = 0; batch < EVENTS / 10; batch++) {
    await writer.begin((tx) =>
      append(
        tx,
        Array.from({ length: 10 }, (_, i) => ({ streamId: `s-${i}`, type: 'T', data: { batch, i } })),
        { schema },
      ),
    );
  }
  await until(
    () => shared.size === EVENTS && perInstance.a.length === EVENTS && perInstance.b.length === EVENTS,
    30_000,
    'every delivery',
  );
  await Promise.all([a.stop(), b.stop()]);

  expect(maxActive).toBe(1);
  expect([...shared.values()].every((count) => count === 1)).toBe(true);
  const all = Array.from({ length: EVENTS }, (_, i) => BigInt(i + 1));
  expect(perInstance.a).toEqual(all);
  expect(perInstance.b).toEqual(all);
});

import { createDispatcher, silentLogger } from '@sluice/core';
import { expect, onTestFinished, test } from 'vitest';
import { drainUntilIdle } from './drain.js';
import { appendEvents, recordingConsumer } from './fixtures.js';
import { holdGap } from './open-transaction.js';
import { useTestDatabase } from './vitest/test-database.js';

const db = await useTestDatabase();

function dispatcherFor(name: string) {
  const consumer = recordingConsumer(name);
  const dispatcher = createDispatcher({
    sql: db.sql,
    consumers: [consumer.consumer],
    logger: silentLogger,
    listen: false,
  });
  onTestFinished(() => dispatcher.stop());
  return { consumer, dispatcher };
}

test('drainUntilIdle runs passes until every event is delivered and no gap is pending', async () => {
  const { consumer, dispatcher } = dispatcherFor('drained');
  await dispatcher.ensureRegistered();
  await appendEvents(db.sql, 250);
  const passes = await drainUntilIdle(dispatcher);
  expect(consumer.ids()).toHaveLength(250);
  expect(passes.at(-1)?.processed).toBe(0);
});

test('holdGap owns an event id: later events are delivered first, the held one on commit', async () => {
  const { consumer, dispatcher } = dispatcherFor('gappy');
  await dispatcher.ensureRegistered();
  await drainUntilIdle(dispatcher); // past the earlier tests' events
  consumer.seen.length = 0;
  const before = await appendEvents(db.sql, 1);
  const gap = await holdGap(db.sql, { streamId: 'held', type: 'Held', data: {} });
  onTestFinished(() => gap.release({ commit: false }));
  const after = await appendEvents(db.sql, 1);
  expect(gap.id).toBe(before[0]!.id + 1n);
  await dispatcher.runOnce();
  expect(consumer.ids()).toEqual([before[0]!.id, after[0]!.id]);
  await gap.release({ commit: true });
  await drainUntilIdle(dispatcher);
  expect(consumer.ids()).toEqual([before[0]!.id, after[0]!.id, gap.id]);
});

test('a held gap keeps drainUntilIdle from settling; the timeout message names the blocking backend', async () => {
  const { dispatcher } = dispatcherFor('blocked');
  await dispatcher.ensureRegistered();
  const gap = await holdGap(db.sql);
  onTestFinished(() => gap.release({ commit: false }));
  await gap.transaction.sql`set application_name = 'the-culprit'`;
  await appendEvents(db.sql, 1);
  const error = await drainUntilIdle(dispatcher, { timeoutMs: 1_000 }).then(
    () => new Error('drainUntilIdle settled although a gap was held'),
    (e: unknown) => e as Error,
  );
  expect(error.message).toContain('still busy after 1000 ms');
  expect(error.message).toContain(`pid ${gap.transaction.pid} (the-culprit`);
  // Rolled back: the id is burnt and the consumer settles.
  await gap.release({ commit: false });
  await drainUntilIdle(dispatcher);
});

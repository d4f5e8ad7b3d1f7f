// orders.test.ts
import { createDispatcher } from '@sluice/core';
import { appendEvents, drainUntilIdle, recordingConsumer } from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import { expect, test } from 'vitest';

const db = await useTestDatabase(); // this file's own database, dropped after it

test('every event reaches the consumer', async () => {
  const consumer = recordingConsumer('projection');
  const dispatcher = createDispatcher({ sql: db.sql, consumers: [consumer.consumer], listen: false });
  await dispatcher.ensureRegistered(); // what start() does first; drainUntilIdle() runs the passes
  await appendEvents(db.sql, 3);
  await drainUntilIdle(dispatcher);
  expect(consumer.seen).toHaveLength(3);
  await dispatcher.stop();
});

import { appendEvents, freshSchema } from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import { expect, test } from 'vitest';
import { tables } from '../schema/tables.js';
import { recordDeadLetters } from './dead-letters.js';

const db = await useTestDatabase();

test('a dead letter copies its event from the events row, and is written as the turn read it when the row is gone', async () => {
  const schema = await freshSchema(db.sql, 'letters');
  const t = tables(db.sql, schema);
  await appendEvents(db.sql, 1, () => ({ streamId: 's', type: 'Kept', data: { n: 0 } }), schema);
  // The row holds more digits than a double: only a copy in SQL keeps them.
  await db.sql`update ${t.events} set data = '{"n": 12345678901234567890}'::jsonb where id = 1`;
  const createdAt = new Date('2026-01-02T03:04:05Z');
  const event = (id: bigint, type: string) => ({
    id,
    streamId: 's',
    type,
    data: { n: 1 },
    metadata: { m: 'read' },
    createdAt,
  });
  await db.sql.begin((tx) =>
    recordDeadLetters(tx, t, 'c', '*', [
      { event: event(1n, 'Kept'), reason: 'apply-error', error: 'boom', attempts: 2 },
      { event: event(2n, 'Pruned'), reason: 'apply-error', error: 'boom', attempts: 2 },
    ]),
  );
  const letters = await db.sql<{ event_id: string; type: string; data: string; metadata: string }[]>`
    select event_id::text, type, data::text, metadata::text from ${t.deadLetters} order by event_id`;
  expect(letters).toEqual([
    { event_id: '1', type: 'Kept', data: '{"n": 12345678901234567890}', metadata: '{}' },
    { event_id: '2', type: 'Pruned', data: '{"n": 1}', metadata: '{"m": "read"}' },
  ]);
});

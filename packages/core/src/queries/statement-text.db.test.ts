// Every statement Sluice sends is plain ASCII. postgres.js rebuilds a statement's text on each call
// (and its prepared-statement key from it); a single non-ASCII character, even in an SQL comment,
// makes V8 store the whole text as two bytes per character. The pre-check once carried a "…" in a
// comment: about 3 KiB more allocated per delivered event (a scratch allocation profile at 200
// appends/s).
import { appendEvents, failingOn, freshSchema, holdGap, recordingConsumer } from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import { expect, test } from 'vitest';
import { append, transaction } from '../append.js';
import { testDispatcher } from '../test-support.js';

const db = await useTestDatabase();

test('the statements of appends and of turns that deliver, retry, fail and wait on a gap are ASCII', async () => {
  const schema = await freshSchema(db.sql);
  const sent = new Set<string>();
  const sql = db.connect({
    max: 6,
    debug: (_connection, query) => {
      sent.add(query);
    },
  });

  await transaction(sql, (tx) =>
    append(tx, [{ streamId: 's', type: 'TestEvent', data: { n: 0 }, metadata: { note: 'first' } }], {
      schema,
    }),
  );
  await appendEvents(sql, 3, undefined, schema);
  const held = await holdGap(db.sql, undefined, { schema });
  await appendEvents(sql, 2, undefined, schema);
  const plain = recordingConsumer('plain');
  const failing = failingOn('failing', (e) => e.id === 2n, { errorPolicy: { maxAttempts: 2 } });
  const dispatcher = testDispatcher(sql, schema, [plain.consumer, failing.consumer]);
  await dispatcher.ensureRegistered();
  for (let i = 0; i < 4; i++) await dispatcher.runOnce();
  await held.release({ commit: true });
  for (let i = 0; i < 3; i++) await dispatcher.runOnce();
  expect(plain.ids()).toHaveLength(7);
  expect(failing.failures.get(2n)).toBe(2);

  const nonAscii = [...sent].filter((text) => /[^ -~\t\n\r]/.test(text));
  expect(sent.size).toBeGreaterThan(10);
  expect(nonAscii).toEqual([]);
  await sql.end();
});

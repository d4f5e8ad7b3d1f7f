import { recordingConsumer, useTestDatabase } from '@sluice/testing';
import { expect, test } from 'vitest';
import { append, transaction } from '../append.js';
import { wakeUpNotifierFor } from '../wake-up/wake-up-notifier.js';
import { consumerRow, freshSchema, testDispatcher, until } from '../test-support.js';

const db = await useTestDatabase();

type Statement = 'begin' | 'precheck' | 'lock' | 'commit' | 'other';

function kindOf(query: string): Statement {
  const text = query.trim().toLowerCase();
  if (text.startsWith('begin')) return 'begin';
  if (text.startsWith('commit')) return 'commit';
  if (text.includes('as quiet')) return 'precheck';
  if (text.includes('for update')) return 'lock';
  return 'other';
}

/**
 * A started dispatcher (no LISTEN, no poll within the test) whose pool logs each statement as it is
 * sent, with one recording consumer that has handled one event: its last turn delivered something.
 */
async function hotDispatcher(name: string) {
  const schema = await freshSchema(db);
  const sent: Statement[] = [];
  const sql = db.connect({
    max: 8,
    debug: (_connection, query) => {
      sent.push(kindOf(query));
    },
  });
  const c = recordingConsumer(name);
  const dispatcher = testDispatcher(sql, schema, [c.consumer], { pollIntervalMs: 60_000 });
  // Found by the start's pass, which no wake-up follows: after its turn commits, nothing runs.
  await sql.begin((tx) =>
    append(tx, [{ streamId: 's', type: 'First', data: {} }], { schema, wakeUp: 'none' }),
  );
  await dispatcher.start();
  await until(() => c.ids().length === 1 && sent.at(-1) === 'commit', 5_000, 'the first turn to commit');
  return { schema, sql, sent, c, dispatcher };
}

test("a pass woken by a commit begins a hot consumer's turn before its pre-check answers", async () => {
  const { schema, sql, sent, c } = await hotDispatcher('early');
  const from = sent.length;
  // On the dispatcher's pool: the commit wakes the dispatcher in this process, without a poll.
  await transaction(sql, (tx) => append(tx, [{ streamId: 's', type: 'Second', data: {} }], { schema }));
  await until(() => c.ids().length === 2, 5_000, 'the second event');
  const pass = sent.slice(from).filter((kind) => kind !== 'other');
  // The append's own transaction, then the turn's BEGIN sent ahead of the pre-check, then its lock.
  expect(pass.slice(0, 5)).toEqual(['begin', 'commit', 'begin', 'precheck', 'lock']);
  await until(
    async () => (await consumerRow(sql, schema, 'early')).cursor === c.ids()[1],
    5_000,
    'the early turn to commit its cursor',
  );
});

test('an early turn the pre-check finds nothing for ends its empty transaction and takes no lock', async () => {
  const { schema, sql, sent, c } = await hotDispatcher('declined');
  const before = await consumerRow(sql, schema, 'declined');
  const from = sent.length;
  // A wake-up with nothing new: the pre-check finds the consumer caught up.
  wakeUpNotifierFor(sql, schema).poke();
  await until(() => sent.slice(from).includes('commit'), 5_000, 'the early transaction to end');
  expect(sent.slice(from).filter((kind) => kind !== 'other')).toEqual(['begin', 'precheck', 'commit']);
  // No longer hot: the next wake-up asks the pre-check first and begins nothing.
  const next = sent.length;
  wakeUpNotifierFor(sql, schema).poke();
  await until(() => sent.slice(next).includes('precheck'), 5_000, 'the next pre-check');
  expect(sent.slice(next).filter((kind) => kind !== 'other')).toEqual(['precheck']);
  expect(c.ids()).toHaveLength(1);
  expect(await consumerRow(sql, schema, 'declined')).toEqual(before);
});

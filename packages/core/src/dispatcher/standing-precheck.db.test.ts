// A pass whose last pre-check stands (dispatcher/pass.ts) asks the server only for the cluster's
// snapshot while it is unchanged, and reads the pre-check in full as soon as anything commits:
// nothing committed is left waiting, and a consumer the clock decides about is never judged from a
// standing answer.
import { appendEvents, freshSchema, recordingConsumer } from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import { expect, test } from 'vitest';
import { testDispatcher } from '../test-support.js';

const db = await useTestDatabase();

type Statement = 'snapshot' | 'precheck' | 'other';

/** A pool that records the kind of every statement it sends. */
function recordingPool() {
  const sent: Statement[] = [];
  const sql = db.connect({
    max: 4,
    debug: (_connection, query) => {
      // The pre-check reads the snapshot too: it is told apart first.
      sent.push(
        query.includes('as quiet')
          ? 'precheck'
          : query.includes('pg_current_snapshot()::text as snapshot')
            ? 'snapshot'
            : 'other',
      );
    },
  });
  return { sql, sent };
}

test('idle passes ask only for the snapshot while nothing commits, and a commit is read and delivered at the next pass', async () => {
  const schema = await freshSchema(db.sql);
  await appendEvents(db.sql, 3, undefined, schema);
  const c = recordingConsumer('c');
  const { sql, sent } = recordingPool();
  const dispatcher = testDispatcher(sql, schema, [c.consumer]);
  await dispatcher.ensureRegistered();
  while ((await dispatcher.runOnce()).processed > 0);
  expect(c.ids()).toHaveLength(3);

  // Other test files commit on this server too: a pass reads the pre-check again exactly when
  // something did. Passes that found the snapshot unchanged sent nothing else.
  let askedOnly = 0;
  for (let i = 0; i < 500 && askedOnly < 3; i++) {
    sent.length = 0;
    const result = await dispatcher.runOnce();
    expect(result.byConsumer['c']?.skipped).toBe('idle');
    expect(sent[0]).toBe('snapshot');
    if (sent.length === 1) askedOnly += 1;
    else expect(sent).toEqual(['snapshot', 'precheck']);
  }
  expect(askedOnly).toBe(3);

  await appendEvents(db.sql, 1, undefined, schema);
  sent.length = 0;
  expect((await dispatcher.runOnce()).processed).toBe(1);
  expect(sent.slice(0, 2)).toEqual(['snapshot', 'precheck']);
  expect(c.ids()).toHaveLength(4);
});

test('a pre-check with a consumer waiting to retry does not stand: its retry is due by the clock alone', async () => {
  const schema = await freshSchema(db.sql);
  await appendEvents(db.sql, 1, undefined, schema);
  let calls = 0;
  const { sql, sent } = recordingPool();
  const dispatcher = testDispatcher(
    sql,
    schema,
    [
      {
        name: 'flaky',
        handler: () => {
          calls += 1;
          if (calls === 1) throw new Error('first attempt fails');
        },
      },
    ],
    { retryDelayMs: 300, retryMaxDelayMs: 300 },
  );
  await dispatcher.ensureRegistered();
  await dispatcher.runOnce();
  expect(calls).toBe(1);
  // While it waits, every pass reads the pre-check in full (the answer depends on the time).
  for (let pass = 0; pass < 2; pass++) {
    sent.length = 0;
    expect((await dispatcher.runOnce()).byConsumer['flaky']?.skipped).toBe('retry-later');
    expect(sent).toEqual(['precheck']);
  }
  const started = Date.now();
  while (calls < 2 && Date.now() - started < 5_000) await dispatcher.runOnce();
  expect(calls).toBe(2);
});

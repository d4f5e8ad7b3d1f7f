// docs/design.md §4.1: the idle pre-check decides the trivially caught-up consumers in SQL and sends only
// their names. Anything that may give a consumer work (or non-zero gauges) must come back as a whole
// row for the pass to judge, typed as the turn reads it.
import { appendEvents, freshSchema } from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import { expect, test } from 'vitest';
import { tables } from '../schema/tables.js';
import { currentSnapshot, precheckConsumers, precheckKeys, registerConsumers } from './consumers.js';

const db = await useTestDatabase();

test('only consumers with provably nothing to do and zero gauges are quiet; every other row comes back whole', async () => {
  const schema = await freshSchema(db.sql);
  const t = tables(db.sql, schema);
  const shared = [
    'at-head',
    'processing-at-head',
    'behind',
    'dead',
    'disabled',
    'retrying',
    'skip',
    'start-fence',
    'gap',
    'gap-count-only',
    'gap-age-only',
    'replay',
    'never-registered',
  ];
  await registerConsumers(
    db.sql,
    t,
    schema,
    shared
      .filter((name) => name !== 'never-registered')
      .map((name) => ({ name, instanceId: '*', startFrom: 'beginning' as const, perInstance: false })),
  );
  await registerConsumers(db.sql, t, schema, [
    { name: 'mine', instanceId: 'i-1', startFrom: 'beginning', perInstance: true },
    // Another instance's row of a per-instance consumer, and a shared row under a per-instance name:
    // neither belongs to this process.
    { name: 'mine', instanceId: 'i-2', startFrom: 'beginning', perInstance: true },
    { name: 'mine', instanceId: '*', startFrom: 'beginning', perInstance: false },
  ]);
  const head = (await appendEvents(db.sql, 3, undefined, schema)).at(-1)?.id ?? 0n;
  await db.sql`update ${t.consumers} set cursor = ${head.toString()}::bigint`;
  const set = (name: string, assignments: string) =>
    db.sql.unsafe(`update "${schema}".consumers set ${assignments} where name = $1`, [name]);
  await set('processing-at-head', `status = 'processing'`);
  await set('behind', `cursor = 1`);
  await set('dead', `status = 'dead', attempts = 5, stuck_event_id = 2`);
  await set('disabled', `status = 'disabled'`);
  await set('retrying', `attempts = 1, stuck_event_id = 3, last_error_at = now()`);
  await set('skip', `skip_event_id = 3`);
  await set('start-fence', `start_fence = pg_current_xact_id()`);
  await set('gap', `gap_count = 1, oldest_gap_at = now()`);
  await set('gap-count-only', `gap_count = 1`);
  await set('gap-age-only', `oldest_gap_at = now()`); // its gauge would not be zero
  // This process's row of 'mine' is behind; the two rows that are not its own are at the head, so
  // 'mine' would show up as quiet if the statement matched names without their instance.
  await db.sql.unsafe(
    `update "${schema}".consumers set cursor = 1 where name = 'mine' and instance_id = 'i-1'`,
  );
  await db.sql`
    insert into ${t.deadLetters} (consumer_name, instance_id, event_id, stream_id, type, data, metadata,
                                  event_created_at, reason, replay_requested_at)
    values ('replay', '*', 2, 's', 'T', '{}', '{}', now(), 'operator-skip', now())`;

  const keys = precheckKeys([
    ...shared.map((name) => ({ name, instanceId: '*' })),
    { name: 'mine', instanceId: 'i-1' },
  ]);
  const precheck = await precheckConsumers(db.sql, t, keys);

  expect([...precheck.quiet].sort()).toEqual(['at-head', 'processing-at-head']);
  expect([...precheck.rows.keys()].sort()).toEqual(
    [
      'behind',
      'dead',
      'disabled',
      'gap',
      'gap-count-only',
      'gap-age-only',
      'mine',
      'replay',
      'retrying',
      'skip',
      'start-fence',
    ].sort(),
  );
  const mine = precheck.rows.get('mine');
  expect(mine).toMatchObject({ instance_id: 'i-1', cursor: '1', head: head.toString(), attempts: 0 });
  expect(mine?.lag_seconds).toBeGreaterThanOrEqual(0);
  expect(precheck.rows.get('replay')?.replays_pending).toBe(true);
  const gap = precheck.rows.get('gap');
  expect(gap?.gap_count).toBe(1);
  expect(gap?.oldest_gap_at).toBeInstanceOf(Date);
  expect(gap?.updated_at).toBeInstanceOf(Date);
  expect(gap?.now).toBeInstanceOf(Date);
  expect(gap?.last_error_at).toBeNull();
  expect(gap?.snapshot).toMatch(/^\d+:\d+:/);
  expect(precheck.rows.get('retrying')?.last_error_at).toBeInstanceOf(Date);
  expect(precheck.rows.get('dead')).toMatchObject({ status: 'dead', stuck_event_id: '2', attempts: 5 });
});

test('a process whose consumer rows do not exist yet gets none, quiet or not', async () => {
  const schema = await freshSchema(db.sql);
  const keys = precheckKeys([
    { name: 'a', instanceId: '*' },
    { name: 'b', instanceId: 'i-1' },
  ]);
  const precheck = await precheckConsumers(db.sql, tables(db.sql, schema), keys);
  expect(precheck.quiet.size).toBe(0);
  expect(precheck.rows.size).toBe(0);
});

test("the cluster's snapshot stays the same while no transaction ends, and changes with a commit", async () => {
  const schema = await freshSchema(db.sql);
  const t = tables(db.sql, schema);
  await registerConsumers(db.sql, t, schema, [
    { name: 'a', instanceId: '*', startFrom: 'beginning', perInstance: false },
  ]);
  const keys = precheckKeys([{ name: 'a', instanceId: '*' }]);

  // Other test files commit on this server too: the snapshot stays the same exactly when no
  // transaction ended between two reads. A pre-check returns the snapshot it read under.
  let unchanged = 0;
  for (let i = 0; i < 500 && unchanged < 3; i++) {
    const { snapshot } = await precheckConsumers(db.sql, t, keys);
    if ((await currentSnapshot(db.sql)) === snapshot) unchanged += 1;
  }
  expect(unchanged).toBe(3);

  // A commit (here an append) ends a transaction, and so does a rollback: the snapshot changes.
  const before = await currentSnapshot(db.sql);
  await appendEvents(db.sql, 1, undefined, schema);
  expect(await currentSnapshot(db.sql)).not.toBe(before);
  const held = await db.sql.reserve();
  try {
    await held`begin`;
    await held`select pg_current_xact_id()`; // running, with an xid, not ended
    const during = await precheckConsumers(db.sql, t, keys);
    expect(during.rows.get('a')).toMatchObject({ cursor: '0' });
    await held`rollback`;
    expect(await currentSnapshot(db.sql)).not.toBe(during.snapshot);
  } finally {
    held.release();
  }
});

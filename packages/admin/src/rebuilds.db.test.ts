// The rebuild actions of the admin API (docs/design.md §12): status with progress, approval (refused
// while far behind, unless forced; refused with nothing changed while a turn holds the row),
// pause, resume, abandon and drop, each validated and audited.
import {
  ConsumerBusyError,
  ConsumerNotFoundError,
  InvalidOptionError,
  RebuildNotFoundError,
  RebuildNotReadyError,
  RebuildStateError,
  type Consumer,
} from '@sluice/core';
import { appendEvents, drainUntilIdle, freshSchema, passUntil } from '@sluice/testing';
import { heldTransaction, testDispatcher, useTestDatabase } from '@sluice/testing/vitest';
import { expect, test } from 'vitest';
import { createAdmin } from './create-admin.js';

const db = await useTestDatabase();

const version = (v: number, seen: bigint[][], extra: Partial<Consumer> = {}): Consumer => ({
  name: 'stats',
  version: v,
  batchSize: 10,
  maxBatchSize: 10,
  handler: (event) => {
    (seen[v] ??= []).push(event.id);
  },
  ...extra,
});

async function setup(next: Partial<Consumer> = {}) {
  const schema = await freshSchema(db.sql, 'admrebuild');
  const seen: bigint[][] = [];
  const one = testDispatcher(db.sql, schema, [version(1, seen)]);
  await one.ensureRegistered();
  await appendEvents(db.sql, 100, undefined, schema);
  await drainUntilIdle(one);
  await one.stop();
  const both = testDispatcher(db.sql, schema, [version(1, seen), version(2, seen, next)]);
  await both.ensureRegistered();
  const admin = createAdmin({ sql: db.sql, schema, lockTimeoutMs: 300, defaultActor: 'alice' });
  return { schema, seen, both, admin };
}

async function audited(schema: string): Promise<string[]> {
  const rows = await db.sql<{ action: string; actor: string }[]>`
    select action, actor from ${db.sql(schema)}.audit where consumer_name = 'stats' order by id`;
  return rows.map((r) => `${r.action} by ${r.actor}`);
}

test('status shows the live version and the rebuild with its progress; an approval too far behind is refused, forced it goes through', async () => {
  // Within 10 events of the head it may take over (approved; the dispatcher would not wait for it).
  const { schema, both, admin } = await setup({ rebuild: { takeover: { withinEvents: 10 } } });
  const [before] = await admin.rebuildStatus();
  expect(before?.consumer).toBe('stats');
  expect(before?.versions.map((v) => [v.version, v.state])).toEqual([
    [1, 'live'],
    [2, 'rebuilding'],
  ]);
  expect(before?.rebuild).toMatchObject({
    version: 2,
    liveVersion: 1,
    position: 0n,
    head: 100n,
    lagEvents: 100n,
    progress: 0,
  });

  const auditBefore = await audited(schema);
  const refused = await admin.approveRebuild('stats').catch((e: unknown) => e);
  expect(refused).toBeInstanceOf(RebuildNotReadyError);
  expect((refused as RebuildNotReadyError).lagEvents).toBe(100n);
  expect(await audited(schema)).toEqual(auditBefore);
  expect((await admin.rebuildStatus('stats'))[0]?.rebuild?.state).toBe('rebuilding');

  const forced = await admin.approveRebuild('stats', { force: true, actor: 'bob', reason: 'go' });
  expect(forced).toMatchObject({ consumer: 'stats', version: 2, state: 'taking-over', barrier: 100n });
  await passUntil(
    both,
    async () => (await admin.rebuildStatus('stats'))[0]?.rebuild === null,
    'version 2 is live',
  );
  expect((await admin.rebuildStatus('stats'))[0]?.versions.map((v) => v.state)).toEqual(['retired', 'live']);
  expect(await audited(schema)).toEqual([
    'rebuild-started by sluice-dispatcher',
    'rebuild-takeover by bob',
    'version-live by sluice-dispatcher',
  ]);
  await expect(admin.approveRebuild('stats')).rejects.toBeInstanceOf(RebuildNotFoundError);
  // The retired version's rows never run again: an action on them is refused, nothing audited.
  for (const action of [
    () => admin.enable('stats'),
    () => admin.restart('stats', { from: 'now' }),
    () => admin.relane('stats', { lanes: 4 }),
  ]) {
    const refused = await action().then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(refused).toMatchObject({ code: 'SLUICE_REBUILD_STATE', version: 1 });
    expect((refused as Error).message).toContain('"stats@v2"');
  }
  expect(await audited(schema)).toHaveLength(3);
  expect((await admin.enable('stats@v2')).consumer).toBe('stats@v2');
  const [takeover] = await db.sql<{ details: { reason?: string; force?: boolean } }[]>`
    select details from ${db.sql(schema)}.audit where action = 'rebuild-takeover'`;
  expect(takeover?.details).toMatchObject({ reason: 'go', force: true });
  await expect(admin.rebuildStatus('nope')).rejects.toBeInstanceOf(ConsumerNotFoundError);
});

test('a turn holding a row past lockTimeoutMs refuses the approval with ConsumerBusyError, nothing changed', async () => {
  const { schema, both, admin } = await setup();
  await drainUntilIdle(both);
  const holder = await heldTransaction(db.sql);
  await holder.sql`select 1 from ${holder.sql(schema)}.consumers where name = 'stats' for update`;
  await expect(admin.approveRebuild('stats')).rejects.toBeInstanceOf(ConsumerBusyError);
  await holder.rollback();
  expect((await admin.rebuildStatus('stats'))[0]?.rebuild?.state).toBe('rebuilding');
  expect((await admin.approveRebuild('stats')).state).toBe('live');
});

test('pause, resume and abandon; drop only a retired version; bad input changes nothing', async () => {
  const { schema, both, seen, admin } = await setup();
  expect(await admin.pauseRebuild('stats', { reason: 'look first' })).toMatchObject({
    version: 2,
    state: 'paused',
  });
  await drainUntilIdle(both);
  expect(seen[2] ?? []).toEqual([]);
  await expect(admin.pauseRebuild('stats')).rejects.toBeInstanceOf(RebuildStateError);
  await expect(admin.approveRebuild('stats', { force: true })).rejects.toBeInstanceOf(RebuildStateError);
  expect(await admin.resumeRebuild('stats')).toMatchObject({ state: 'rebuilding' });
  await drainUntilIdle(both);
  expect(seen[2]).toHaveLength(100);
  // Paused behind the head after it has moved: a rate, and no time left estimated (nothing moves).
  await appendEvents(db.sql, 5, undefined, schema);
  await admin.pauseRebuild('stats');
  const [paused] = await admin.rebuildStatus('stats');
  expect(paused?.rebuild).toMatchObject({ state: 'paused', lagEvents: 5n, etaSeconds: null });
  expect(paused?.rebuild?.ratePerSecond).toBeGreaterThan(0);
  expect(await admin.resumeRebuild('stats')).toMatchObject({ state: 'rebuilding' });
  expect((await admin.rebuildStatus('stats'))[0]?.rebuild?.etaSeconds).toBeGreaterThan(0);
  await drainUntilIdle(both);

  await expect(admin.dropVersion('stats', 1)).rejects.toBeInstanceOf(RebuildStateError);
  await expect(admin.dropVersion('stats', 9)).rejects.toBeInstanceOf(RebuildNotFoundError);
  await expect(admin.approveRebuild('stats', { version: 0 })).rejects.toBeInstanceOf(InvalidOptionError);
  await expect(admin.approveRebuild('stats', { version: 3 })).rejects.toBeInstanceOf(RebuildNotFoundError);
  await expect(admin.approveRebuild('nope')).rejects.toThrow('No consumer "nope" is registered');

  expect(await admin.abandonRebuild('stats', { reason: 'wrong shape' })).toMatchObject({
    state: 'abandoned',
  });
  const [row] =
    await db.sql`select count(*)::int as n from ${db.sql(schema)}.consumers where name = 'stats@v2'`;
  expect(row?.['n']).toBe(0);
  expect((await audited(schema)).slice(1)).toEqual([
    'rebuild-paused by alice',
    'rebuild-resumed by alice',
    'rebuild-paused by alice',
    'rebuild-resumed by alice',
    'rebuild-abandoned by alice',
  ]);
});

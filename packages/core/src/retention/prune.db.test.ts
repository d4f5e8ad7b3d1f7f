import { RETENTION_LOCK_CLASS } from '../queries/consumers.js';
import { migrate, MIGRATION_LOCK_CLASS } from '../schema/migrate.js';
import {
  appendEvents,
  capturingLogger,
  drainUntilIdle,
  freshSchema,
  recordingConsumer,
  until,
} from '@sluice/testing';
import {
  heldTransaction,
  registeredDispatcher,
  testDispatcher,
  useTestDatabase,
} from '@sluice/testing/vitest';
import { describe, expect, test } from 'vitest';
import { PruneBlockedError } from '../errors.js';
import { prune } from './prune.js';

const db = await useTestDatabase();

async function eventIds(schema: string): Promise<bigint[]> {
  const rows = await db.sql<
    { id: string }[]
  >`select e.id::text from ${db.sql(`${schema}.events`)} e order by e.id`;
  return rows.map((r) => BigInt(r.id));
}

describe('prune', () => {
  test('refuses, naming the consumer, while a registered consumer still needs the events; then succeeds', async () => {
    const c = recordingConsumer('archiver');
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer]);
    await appendEvents(db.sql, 10, undefined, schema);
    const error = await prune(db.sql, { before: 6n, schema }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PruneBlockedError);
    expect((error as PruneBlockedError).laggingConsumers).toEqual(['archiver (idle, cursor 0)']);
    expect(await eventIds(schema)).toHaveLength(10); // nothing deleted
    await drainUntilIdle(dispatcher);
    expect(await prune(db.sql, { before: 6n, schema })).toEqual({ deleted: 5 });
    expect(await eventIds(schema)).toEqual([6n, 7n, 8n, 9n, 10n]);
  });

  test('keeps events inside a consumer’s pending gap', async () => {
    const c = recordingConsumer('careful');
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer]);
    const writer = await heldTransaction(db.sql);
    await writer.append([{ streamId: 's', type: 'Late', data: {} }], { schema }); // id 1, in flight
    await appendEvents(db.sql, 3, undefined, schema); // 2..4
    await dispatcher.runOnce(); // cursor 4, gap {1}
    const blocked = await prune(db.sql, { before: 3n, schema }).catch((e: unknown) => e);
    expect(blocked).toBeInstanceOf(PruneBlockedError);
    // Its cursor is past 3: the refusal says what else holds the events back.
    expect((blocked as PruneBlockedError).laggingConsumers).toEqual([
      'careful (idle, cursor 4, a pending gap from 1)',
    ]);
    await writer.commit();
    await drainUntilIdle(dispatcher);
    expect(c.ids()).toEqual([2n, 3n, 4n, 1n]);
    expect(await prune(db.sql, { before: 3n, schema })).toEqual({ deleted: 2 });
  });

  test("a 'now' start still waiting for transactions in flight holds retention back, and the refusal says so", async () => {
    const schema = await freshSchema(db.sql);
    const writer = await heldTransaction(db.sql);
    await writer.append([{ streamId: 's', type: 'Late', data: {} }], { schema }); // id 1, in flight
    await appendEvents(db.sql, 3, undefined, schema); // 2..4
    const dispatcher = testDispatcher(db.sql, schema, [
      recordingConsumer('fresh', { startFrom: 'now' }).consumer,
    ]);
    await dispatcher.ensureRegistered(); // cursor 4, waiting for the writer
    const blocked = await prune(db.sql, { before: 3n, schema }).catch((e: unknown) => e);
    expect((blocked as PruneBlockedError).laggingConsumers).toEqual([
      'fresh (idle, cursor 4, a start still waiting for transactions in flight at its registration or restart)',
    ]);
    await writer.commit();
    await drainUntilIdle(dispatcher);
    expect(await prune(db.sql, { before: 3n, schema })).toEqual({ deleted: 2 });
  });

  test('stale per-instance rows do not hold retention back', async () => {
    const c = recordingConsumer('feed', { delivery: 'per-instance' });
    const { schema } = await registeredDispatcher(db.sql, [c.consumer], {
      instanceId: 'gone-instance',
    });
    await appendEvents(db.sql, 4, undefined, schema);
    await expect(prune(db.sql, { before: 3n, schema })).rejects.toBeInstanceOf(PruneBlockedError);
    await db.sql`update ${db.sql(`${schema}.consumers`)} set last_seen_at = now() - interval '2 days'`;
    expect(await prune(db.sql, { before: 3n, schema })).toEqual({ deleted: 2 });
    // The instance comes back: what it missed is said at its start, and it goes on from what is kept.
    const logger = capturingLogger();
    const back = testDispatcher(db.sql, schema, [c.consumer], { instanceId: 'gone-instance', logger });
    await back.ensureRegistered();
    const errors = logger.lines.filter((l) => l.level === 'error');
    expect(errors).toHaveLength(1);
    expect(errors[0]?.message).toMatch(/retention pruned events .* ids 1 to 2 are not delivered to it$/);
    expect(errors[0]?.fields).toEqual({
      consumer: 'feed',
      instanceId: 'gone-instance',
      cursor: 0n,
      prunedThrough: 2n,
      pendingFrom: null,
      stragglers: false,
    });
    await drainUntilIdle(back);
    expect(c.ids()).toEqual([3n, 4n]);
    // A row created after the prune starts at what is kept: nothing to say.
    const fresh = capturingLogger();
    await testDispatcher(db.sql, schema, [c.consumer], {
      instanceId: 'new-instance',
      logger: fresh,
    }).ensureRegistered();
    expect(fresh.lines.filter((l) => l.level === 'error')).toEqual([]);
  });

  test("a stale per-instance row's pending range and 'now' stragglers that were pruned are said at its start", async () => {
    const schema = await freshSchema(db.sql);
    await appendEvents(db.sql, 2, undefined, schema); // 1, 2
    const early = await heldTransaction(db.sql);
    await early.append([{ streamId: 's', type: 'Late', data: {} }], { schema }); // 3, in flight
    await appendEvents(db.sql, 1, undefined, schema); // 4
    const nowFeed = recordingConsumer('now-feed', { delivery: 'per-instance', startFrom: 'now' });
    const gapFeed = recordingConsumer('gap-feed', { delivery: 'per-instance' });
    const first = testDispatcher(db.sql, schema, [nowFeed.consumer, gapFeed.consumer], { instanceId: 'i1' });
    await first.ensureRegistered(); // now-feed: cursor 4, waiting for 3
    await first.runOnce(); // gap-feed: 1, 2, 4 delivered; 3 pending
    await first.stop();
    await early.commit(); // 3 commits while the process is away
    await db.sql`update ${db.sql(`${schema}.consumers`)} set last_seen_at = now() - interval '2 days'`;
    expect(await prune(db.sql, { before: 5n, schema })).toEqual({ deleted: 4 }); // 3 among them
    const logger = capturingLogger();
    const back = testDispatcher(db.sql, schema, [nowFeed.consumer, gapFeed.consumer], {
      instanceId: 'i1',
      logger,
    });
    await back.ensureRegistered();
    const errors = logger.lines.filter((l) => l.level === 'error');
    expect(errors.map((e) => e.fields)).toEqual([
      {
        consumer: 'gap-feed',
        instanceId: 'i1',
        cursor: 4n,
        prunedThrough: 4n,
        pendingFrom: 3n,
        stragglers: false,
      },
      {
        consumer: 'now-feed',
        instanceId: 'i1',
        cursor: 4n,
        prunedThrough: 4n,
        pendingFrom: null,
        stragglers: true,
      },
    ]);
    expect(errors[0]?.message).toContain('the ids from 3 to 4 it was still waiting for');
    expect(errors[1]?.message).toContain("the events up to 4 that were in flight at its 'now' registration");
    await back.stop();
  });

  test('a per-instance row registered after the last prune is not said to have lost what it waits for below the floor', async () => {
    const schema = await freshSchema(db.sql);
    await appendEvents(db.sql, 3, undefined, schema); // 1..3
    expect(await prune(db.sql, { before: 4n, schema })).toEqual({ deleted: 3 });
    const writer = await heldTransaction(db.sql);
    await writer.append([{ streamId: 's', type: 'Late', data: {} }], { schema }); // 4, in flight
    await appendEvents(db.sql, 1, undefined, schema); // 5
    const feed = recordingConsumer('feed', { delivery: 'per-instance', startFrom: 'now' });
    const first = testDispatcher(db.sql, schema, [feed.consumer], { instanceId: 'i1' });
    await first.ensureRegistered(); // cursor 5, waiting for 4
    await first.stop();
    const logger = capturingLogger();
    const again = testDispatcher(db.sql, schema, [feed.consumer], { instanceId: 'i1', logger });
    await again.ensureRegistered();
    expect(logger.lines.filter((l) => l.level === 'error')).toEqual([]);
    await writer.commit();
    await drainUntilIdle(again);
    expect(feed.ids()).toEqual([4n]);
    await again.stop();
  });

  test('refuses a before above the one after the log head: the floor would make later events look pruned', async () => {
    const schema = await freshSchema(db.sql);
    await appendEvents(db.sql, 5, undefined, schema); // 1..5, and no consumer to hold retention back
    await expect(prune(db.sql, { before: 1000n, schema })).rejects.toMatchObject({
      code: 'SLUICE_BEYOND_HEAD',
      head: 5n,
    });
    expect(await eventIds(schema)).toHaveLength(5); // nothing deleted, no floor recorded
    expect(await prune(db.sql, { before: 6n, schema })).toEqual({ deleted: 5 });
    // Every event is gone: the head is still where the floor says, and pruning to it again is fine.
    expect(await prune(db.sql, { before: 6n, schema })).toEqual({ deleted: 0 });
    await expect(prune(db.sql, { before: 7n, schema })).rejects.toMatchObject({ code: 'SLUICE_BEYOND_HEAD' });
    await appendEvents(db.sql, 3, undefined, schema); // 6..8
    const c = recordingConsumer('late');
    const dispatcher = testDispatcher(db.sql, schema, [c.consumer]);
    await dispatcher.ensureRegistered();
    await drainUntilIdle(dispatcher);
    expect(c.ids()).toEqual([6n, 7n, 8n]);
  });

  test('says beyond the head, not blocked, when consumers at the head are below such a before', async () => {
    const c = recordingConsumer('caught-up');
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer]);
    await appendEvents(db.sql, 5, undefined, schema);
    await drainUntilIdle(dispatcher); // cursor 5: at the head
    await expect(prune(db.sql, { before: 100n, schema })).rejects.toMatchObject({
      code: 'SLUICE_BEYOND_HEAD',
      head: 5n,
    });
    expect(await eventIds(schema)).toHaveLength(5);
  });

  test('rejects a before that is not a bigint id, a bad actor, and a schema not migrated', async () => {
    await expect(prune(db.sql, { before: 0n })).rejects.toMatchObject({
      code: 'SLUICE_INVALID_OPTION',
      option: 'before',
    });
    await expect(prune(db.sql, { before: 5 as unknown as bigint })).rejects.toMatchObject({
      code: 'SLUICE_INVALID_OPTION',
    });
    await expect(
      prune(db.sql, { before: 1n, staleInstanceTtlMs: Number.MAX_SAFE_INTEGER }),
    ).rejects.toMatchObject({ code: 'SLUICE_INVALID_OPTION', option: 'staleInstanceTtlMs' });
    await expect(prune(db.sql, { before: 2n ** 63n })).rejects.toMatchObject({ option: 'before' });
    for (const actor of ['', 'a\u0000b', 'x'.repeat(201)]) {
      await expect(prune(db.sql, { before: 1n, actor })).rejects.toMatchObject({ option: 'actor' });
    }
    await expect(prune(db.sql, { before: 1n, schema: 'never_migrated' })).rejects.toMatchObject({
      code: 'SLUICE_SCHEMA_NOT_MIGRATED',
    });
  });
});

describe('advisory locks under a role with short lock and statement timeouts', () => {
  // What a role's or database's settings give every session of the application's pool.
  const shortTimeouts = () => db.connect({ connection: { lock_timeout: 30, statement_timeout: 300 } });

  /** Runs `act` while the test holds the advisory lock `lockClass` of `schema`; it waits past both timeouts, then gets it. */
  async function waitsFor(schema: string, lockClass: number, act: () => Promise<unknown>) {
    const holder = await heldTransaction(db.sql);
    await holder.sql`select pg_advisory_xact_lock(${lockClass}, hashtext(${schema}))`;
    const acting = act();
    acting.catch(() => undefined);
    await until(
      async () =>
        (
          await db.sql`select 1 from pg_locks l join pg_stat_activity a on a.pid = l.pid
                       where l.locktype = 'advisory' and not l.granted and l.objid = hashtext(${schema})::oid
                         and a.query_start < clock_timestamp() - interval '500 milliseconds'`
        ).length > 0,
      10_000,
      'a wait for the advisory lock longer than both timeouts',
    );
    await holder.commit();
    return acting;
  }

  test('a start waits for a prune, a prune for a registration, a migrate for another', async () => {
    const sql = shortTimeouts();
    const { schema } = await registeredDispatcher(db.sql, [recordingConsumer('a').consumer]);
    await appendEvents(db.sql, 2, undefined, schema);
    await waitsFor(schema, RETENTION_LOCK_CLASS, () =>
      testDispatcher(sql, schema, [recordingConsumer('b').consumer]).ensureRegistered(),
    );
    await expect(
      waitsFor(schema, RETENTION_LOCK_CLASS, () => prune(sql, { before: 1n, schema })),
    ).resolves.toEqual({
      deleted: 0,
    });
    const fresh = await freshSchema(db.sql);
    await expect(
      waitsFor(fresh, MIGRATION_LOCK_CLASS, () => migrate(sql, { schema: fresh, logger: capturingLogger() })),
    ).resolves.toMatchObject({ schema: fresh, warnings: [] });
    // The timeouts are the session's again after the lock.
    const [settings] = await sql<{ lock_timeout: string; statement_timeout: string }[]>`
      select current_setting('lock_timeout') as lock_timeout, current_setting('statement_timeout') as statement_timeout`;
    expect(settings).toEqual({ lock_timeout: '30ms', statement_timeout: '300ms' });
  });
});

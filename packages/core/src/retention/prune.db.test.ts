import { appendEvents, drainUntilIdle, recordingConsumer } from '@sluice/testing';
import { heldTransaction, registeredDispatcher, useTestDatabase } from '@sluice/testing/vitest';
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
    await expect(prune(db.sql, { before: 3n, schema })).rejects.toBeInstanceOf(PruneBlockedError);
    await writer.commit();
    await drainUntilIdle(dispatcher);
    expect(c.ids()).toEqual([2n, 3n, 4n, 1n]);
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

import { useTestDatabase } from '@sluice/testing/vitest';
import { describe, expect, test } from 'vitest';
import { SchemaNotMigratedError, SequenceCachedError, XidGuardMissingError } from '../errors.js';
import { silentLogger } from '../logger.js';
import { migrate } from './migrate.js';
import { verifySchema } from './verify-schema.js';

const db = await useTestDatabase();

async function freshSchema(schema: string): Promise<void> {
  await migrate(db.sql, { schema, logger: silentLogger });
}

describe('verifySchema', () => {
  test('accepts a freshly migrated schema without warnings', async () => {
    const result = await verifySchema(db.sql);
    expect(result.schema).toBe('sluice');
    expect(result.warnings).toEqual([]);
    expect(result.serverVersionNum).toBeGreaterThanOrEqual(140000);
  });

  test('rejects an events id sequence with CACHE 20', async () => {
    await freshSchema('cached');
    await db.sql`alter sequence cached.events_id_seq cache 20`;
    const error = await verifySchema(db.sql, { schema: 'cached' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SequenceCachedError);
    expect(error).toMatchObject({ code: 'SLUICE_SEQUENCE_CACHED', cacheSize: 20n });
    expect((error as Error).message).toContain('CACHE 1');
    // migrate() runs the same check, so a process would refuse to start on this schema.
    await expect(migrate(db.sql, { schema: 'cached', logger: silentLogger })).rejects.toBeInstanceOf(
      SequenceCachedError,
    );
  });

  test('rejects events without the xid-before-id trigger', async () => {
    await freshSchema('no_guard');
    await db.sql`drop trigger events_assign_xid on no_guard.events`;
    await expect(verifySchema(db.sql, { schema: 'no_guard' })).rejects.toBeInstanceOf(XidGuardMissingError);
  });

  test('rejects a disabled xid-before-id trigger', async () => {
    await freshSchema('disabled_guard');
    await db.sql`alter table disabled_guard.events disable trigger events_assign_xid`;
    await expect(verifySchema(db.sql, { schema: 'disabled_guard' })).rejects.toMatchObject({
      code: 'SLUICE_XID_GUARD_MISSING',
    });
  });

  test('warns when the trigger would not fire under session_replication_role = replica', async () => {
    await freshSchema('origin_only');
    await db.sql`alter table origin_only.events enable trigger events_assign_xid`;
    const result = await verifySchema(db.sql, { schema: 'origin_only' });
    expect(result.warnings.join('\n')).toContain('ENABLE ALWAYS TRIGGER');
  });

  test('warns when synchronous_commit is off', async () => {
    const reserved = await db.sql.reserve();
    try {
      await reserved`set synchronous_commit = off`;
      const result = await verifySchema(reserved);
      expect(result.warnings.join('\n')).toContain('synchronous_commit is off');
    } finally {
      await reserved`reset synchronous_commit`;
      reserved.release();
    }
  });

  test('a schema migrated by an older release (its last migrations missing) is not migrated, and says how far it is', async () => {
    await freshSchema('older');
    // As a release two migrations back left it: the schema is there, its last two are not recorded.
    await db.sql`delete from older.migrations where version > (select max(version) - 2 from older.migrations)`;
    const [last] = await db.sql<{ version: number }[]>`select max(version) as version from older.migrations`;
    const error = await verifySchema(db.sql, { schema: 'older' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SchemaNotMigratedError);
    expect((error as Error).message).toBe(
      `Sluice schema "older" is migrated up to migration ${last?.version}, and this release needs ${(last?.version ?? 0) + 2}: call migrate(sql, { schema: 'older' }) first`,
    );
  });

  test('names the missing schema', async () => {
    const error = await verifySchema(db.sql, { schema: 'never_migrated' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SchemaNotMigratedError);
    expect((error as Error).message).toContain("migrate(sql, { schema: 'never_migrated' })");
  });
});

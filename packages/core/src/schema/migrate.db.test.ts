import { useLoginRole, useTestDatabase } from '@sluice/testing/vitest';
import { describe, expect, onTestFinished, test } from 'vitest';
import { MigrationFailedError, MigrationModifiedError } from '../errors.js';
import { silentLogger } from '../logger.js';
import { loadMigrations } from './load-migrations.js';
import { migrate } from './migrate.js';

const db = await useTestDatabase();
const quiet = { logger: silentLogger };
const runtime = useLoginRole(db, 'sluice_runtime');

describe('migrate', () => {
  test('applies every migration to a new schema, then nothing on the next call', async () => {
    const shipped = (await loadMigrations()).map((m) => m.name);
    const first = await migrate(db.sql, { schema: 'idempotent', ...quiet });
    expect(first.applied).toEqual(shipped);
    const second = await migrate(db.sql, { schema: 'idempotent', ...quiet });
    expect(second.applied).toEqual([]);
    const rows = await db.sql<
      { version: number }[]
    >`select version from idempotent.migrations order by version`;
    expect(rows.map((r) => r.version)).toEqual((await loadMigrations()).map((m) => m.version));
  });

  test('a role that only runs the application (no CREATE on the database or the schema) migrates once the owner has: nothing to do, no error', async () => {
    await migrate(db.sql, { schema: 'owned_by_admin', ...quiet });
    await runtime.grant('owned_by_admin');
    const again = await migrate(runtime.sql(), { schema: 'owned_by_admin', ...quiet });
    expect(again.applied).toEqual([]);
  });

  test('five processes migrating at the same moment apply each migration exactly once', async () => {
    // Separate pools: separate sessions racing for the advisory lock, as booting instances do.
    const pools = Array.from({ length: 5 }, () => db.connect({ max: 1 }));
    const results = await Promise.all(pools.map((pool) => migrate(pool, { schema: 'racing', ...quiet })));
    const shipped = (await loadMigrations()).map((m) => m.name);
    expect(results.flatMap((r) => r.applied).sort()).toEqual([...shipped].sort());
    expect(results.filter((r) => r.applied.length > 0)).toHaveLength(1);
    const [count] = await db.sql<{ n: number }[]>`select count(*)::int as n from racing.migrations`;
    expect(count?.n).toBe(shipped.length);
  });

  test('refuses to run when an applied migration differs from the shipped one', async () => {
    await migrate(db.sql, { schema: 'edited', ...quiet });
    await db.sql`update edited.migrations set checksum = 'something else' where version = 1`;
    await expect(migrate(db.sql, { schema: 'edited', ...quiet })).rejects.toBeInstanceOf(
      MigrationModifiedError,
    );
  });

  test('a migration that fails is a typed error naming it, and nothing of the run stays', async () => {
    // A table of the same name, not Sluice's, already in the schema: migration 1 cannot create it.
    await db.sql`create schema occupied`;
    await db.sql`create table occupied.events (note text)`;
    const failing = migrate(db.sql, { schema: 'occupied', ...quiet });
    await expect(failing).rejects.toBeInstanceOf(MigrationFailedError);
    await expect(failing).rejects.toMatchObject({ code: 'SLUICE_MIGRATION_FAILED' });
    const [left] = await db.sql<{ migrations: string | null }[]>`
      select to_regclass('occupied.migrations')::text as migrations`;
    expect(left?.migrations).toBeNull(); // rolled back with the run
  });

  test('accepts an applied migration whose file changed only in whole-line comments since', async () => {
    await migrate(db.sql, { schema: 'reworded', ...quiet });
    // What a database migrated before migration 1's comments were reworded holds.
    const before = 'f7d5fbad8112255f23076398fa5a373467976e49c7f034ce721c5a8a0a586588';
    await db.sql`update reworded.migrations set checksum = ${before} where version = 1`;
    await expect(migrate(db.sql, { schema: 'reworded', ...quiet })).resolves.toMatchObject({ applied: [] });
  });

  test('the template database given to tests is migrated in the default schema', async () => {
    const result = await migrate(db.sql, quiet);
    expect(result).toMatchObject({ schema: 'sluice', applied: [] });
  });

  test('rejects a schema name that is not a plain identifier, touching nothing', async () => {
    await expect(migrate(db.sql, { schema: 'bad"; drop schema sluice; --', ...quiet })).rejects.toMatchObject(
      {
        code: 'SLUICE_INVALID_OPTION',
        option: 'schema',
      },
    );
    const [row] = await db.sql<
      { n: number }[]
    >`select count(*)::int as n from pg_namespace where nspname like 'bad%'`;
    expect(row?.n).toBe(0);
  });

  test.each(['pg_catalog', 'pg_temp', 'pg_mine', 'information_schema'])(
    'rejects %s, a schema name PostgreSQL keeps for itself',
    async (schema) => {
      await expect(migrate(db.sql, { schema, ...quiet })).rejects.toMatchObject({
        code: 'SLUICE_INVALID_OPTION',
        option: 'schema',
      });
    },
  );

  test("a schema whose table `migrations` is another tool's, and a role that may not create the schema: typed errors, nothing made", async () => {
    await db.sql`create schema if not exists app_tool`;
    onTestFinished(() => db.sql`drop schema if exists app_tool cascade`.then(() => undefined));
    await db.sql`create table app_tool.migrations (id serial primary key, name text, run_on timestamptz)`;
    const foreign = await migrate(db.sql, { schema: 'app_tool', ...quiet }).catch((e: unknown) => e);
    expect(foreign).toBeInstanceOf(MigrationFailedError);
    expect((foreign as Error).message).toContain("app_tool.migrations is not Sluice's migrations table");
    const [tables] = await db.sql<{ n: number }[]>`
      select count(*)::int as n from pg_tables where schemaname = 'app_tool'`;
    expect(tables?.n).toBe(1);

    const denied = await migrate(runtime.sql(), { schema: 'not_allowed', ...quiet }).catch((e: unknown) => e);
    expect(denied).toBeInstanceOf(MigrationFailedError);
    expect(denied).toMatchObject({ code: 'SLUICE_MIGRATION_FAILED', version: 0, sqlState: '42501' });
  });

  test('two schemas in one database are isolated', async () => {
    await migrate(db.sql, { schema: 'tenant_a', ...quiet });
    await migrate(db.sql, { schema: 'tenant_b', ...quiet });
    await db.sql`insert into tenant_a.events (stream_id, type, data) values ('s', 'only-in-a', '{}')`;
    await db.sql`insert into tenant_a.consumers (name, instance_id) values ('projection', '*')`;
    onTestFinished(async () => {
      await db.sql`drop schema tenant_a cascade`;
      await db.sql`drop schema tenant_b cascade`;
    });
    const [b] = await db.sql<{ events: number; consumers: number }[]>`
      select (select count(*)::int from tenant_b.events) as events,
             (select count(*)::int from tenant_b.consumers) as consumers`;
    expect(b).toEqual({ events: 0, consumers: 0 });
    // Each schema has its own id sequence.
    const [next] = await db.sql<{ id: string }[]>`
      insert into tenant_b.events (stream_id, type, data) values ('s', 'b', '{}') returning id::text as id`;
    expect(next?.id).toBe('1');
  });
});

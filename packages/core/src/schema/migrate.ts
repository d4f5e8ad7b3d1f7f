import { takeAdvisoryLocks } from '../queries/advisory-locks.js';
import { guardedBegin } from '../connections/guarded-transaction.js';
import { MigrationFailedError, MigrationModifiedError } from '../errors.js';
import { consoleLogger, type Logger } from '../logger.js';
import { optionsObject, requireLogger, requirePool } from '../options.js';
import { type Sql, type TransactionSql, valuesOf } from '../sql-types.js';
import { loadMigrations, renderMigration } from './load-migrations.js';
import { resolveSchemaName, tables } from './tables.js';
import { verifySchema } from './verify-schema.js';

export interface MigrateOptions {
  /** Schema holding Sluice's tables. @defaultValue 'sluice' */
  schema?: string;
  /** Where verifySchema()'s warnings go. @defaultValue console */
  logger?: Logger;
}

export interface MigrateResult {
  readonly schema: string;
  /** File names of the migrations this call applied (empty when the schema was up to date). */
  readonly applied: readonly string[];
  readonly warnings: readonly string[];
}

// First key of the two-key advisory lock: 'SLUC'. The second is hashtext(schema), so two schemas
// migrate independently and N processes booting at once migrate a schema exactly once.
export const MIGRATION_LOCK_CLASS = 0x534c5543;

/**
 * The migrations applied in `schema` (version to checksum), its schema and migrations table made
 * first when missing: only then, since PostgreSQL checks the CREATE privilege (on the database, on
 * the schema) before it honours IF NOT EXISTS, and a role that only runs the application has
 * neither (nor does an existing one then raise a notice at every boot).
 * @throws the server's error, or one saying that a table `migrations` already there is not Sluice's
 */
async function appliedMigrations(tx: TransactionSql, schema: string): Promise<Map<number, string>> {
  const t = tables(tx, schema);
  const [present] = await valuesOf<[schema: boolean, migrations: boolean, ours: boolean]>(tx`
    select exists (select 1 from pg_namespace where nspname = ${schema}),
           to_regclass(format('%I.migrations', ${schema}::text)) is not null,
           (select count(*) = 3 from pg_attribute
            where attrelid = to_regclass(format('%I.migrations', ${schema}::text))
              and attname in ('version', 'name', 'checksum') and not attisdropped)`);
  const [schemaThere, migrationsThere, ours] = present ?? [false, false, false];
  if (!schemaThere) await tx`create schema if not exists ${t.schema}`;
  if (!migrationsThere) {
    await tx`
      create table if not exists ${t.migrations} (
        version integer primary key,
        name text not null,
        checksum text not null,
        applied_at timestamptz not null default now()
      )`;
  } else if (!ours) {
    throw new Error(
      `${schema}.migrations is not Sluice's migrations table (it has no version, name and checksum ` +
        'columns): give Sluice a schema of its own (the schema option)',
    );
  }
  const rows = await valuesOf<[version: number, checksum: string]>(
    tx`select version, checksum from ${t.migrations}`,
  );
  return new Map(rows);
}

/**
 * Applies the pending migrations of `schema` in one transaction under a transaction-scoped advisory
 * lock, then runs verifySchema(). Safe to call from every process at boot.
 * @throws {MigrationFailedError} @throws {MigrationModifiedError} and whatever verifySchema() throws
 */
export async function migrate(sql: Sql, migrateOptions?: MigrateOptions): Promise<MigrateResult> {
  requirePool(sql);
  const options = optionsObject(migrateOptions, { fields: ['schema', 'logger'], of: 'migrate()' });
  const schema = resolveSchemaName(options.schema);
  const logger = requireLogger(options.logger ?? consoleLogger);
  const migrations = await loadMigrations();

  const applied = await guardedBegin(sql, async (tx) => {
    const t = tables(tx, schema);
    // Every process may migrate at boot: the others wait for the first, whatever the role's timeouts.
    await takeAdvisoryLocks(
      tx,
      () => tx`select pg_advisory_xact_lock(${MIGRATION_LOCK_CLASS}, hashtext(${schema}))`,
    );
    const done = await appliedMigrations(tx, schema).catch((error: unknown) => {
      // The schema, its migrations table, or the role's right to make them: said in one typed error.
      throw new MigrationFailedError(0, `setup of schema "${schema}"`, error);
    });
    const names: string[] = [];
    for (const migration of migrations) {
      const checksum = done.get(migration.version);
      if (checksum !== undefined) {
        if (checksum !== migration.checksum && !migration.formerChecksums.includes(checksum))
          throw new MigrationModifiedError(migration.version, migration.name);
        continue;
      }
      try {
        // The one sql.unsafe call in Sluice (CONVENTIONS.md#sql-and-migrations): migration files are
        // multi-statement SQL shipped with the package; the only substitution is the validated
        // schema identifier.
        await tx.unsafe(renderMigration(migration.text, schema));
      } catch (error) {
        throw new MigrationFailedError(migration.version, migration.name, error);
      }
      await tx`
        insert into ${t.migrations} (version, name, checksum)
        values (${migration.version}, ${migration.name}, ${migration.checksum})`;
      names.push(migration.name);
    }
    return names;
  });

  const verification = await verifySchema(sql, { schema });
  for (const warning of verification.warnings) logger.warn({ schema }, warning);
  return { schema, applied, warnings: verification.warnings };
}

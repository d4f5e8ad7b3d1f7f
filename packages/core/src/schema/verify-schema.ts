import {
  PostgresUnsupportedError,
  SchemaNotMigratedError,
  SequenceCachedError,
  XidGuardMissingError,
} from '../errors.js';
import { type Queryable, valuesOf } from '../sql-types.js';
import { loadMigrations } from './load-migrations.js';
import { optionsObject, requirePool } from '../options.js';
import { resolveSchemaName } from './tables.js';

/** PostgreSQL 14 is the oldest release Sluice supports (xid8 functions, multiranges). */
export const MINIMUM_SERVER_VERSION_NUM = 140000;

/**
 * @throws {PostgresUnsupportedError} naming the setting, when the sessions of `sql` have one Sluice
 *   cannot work with: a DateStyle whose output is not ISO ('SQL, DMY', say: postgres.js reads times
 *   as ISO 8601 only, so retry delays, re-arm cooldowns and timed disables would read a
 *   day-and-month swap or Invalid Dates), or array_nulls off (the NULL elements of the arrays
 *   Sluice sends would read as the text 'NULL')
 */
export async function refuseSessionSettings(sql: Queryable): Promise<void> {
  const [row] = await valuesOf<[serverVersionNum: number, dateStyle: string, arrayNulls: string]>(sql`
    select current_setting('server_version_num')::int, current_setting('DateStyle'),
           current_setting('array_nulls')`);
  if (row === undefined) return;
  const [serverVersionNum, dateStyle, arrayNulls] = row;
  const setting = !/^iso\b/i.test(dateStyle)
    ? { name: 'DateStyle' as const, value: dateStyle }
    : arrayNulls !== 'on'
      ? { name: 'array_nulls' as const, value: arrayNulls }
      : undefined;
  if (setting) throw new PostgresUnsupportedError(serverVersionNum, MINIMUM_SERVER_VERSION_NUM, setting);
}

export interface VerifySchemaOptions {
  /** @defaultValue 'sluice' */
  schema?: string;
}

export interface VerifySchemaResult {
  readonly schema: string;
  readonly serverVersionNum: number;
  /** Problems that do not stop Sluice but can lose or re-deliver events; log them. */
  readonly warnings: readonly string[];
}

// Read by position (see valuesOf): the caller's pool may rename columns.
type ServerRow = [
  serverVersionNum: number,
  synchronousCommit: string,
  eventsTable: string | null,
  missingTables: string | null,
];
type SequenceRow = [sequence: string, cacheSize: string];
type TriggerRow = [name: string, enabled: string];

/**
 * Checks what the gap proof relies on (docs/design.md §3.2): the server version, the events id
 * sequence has CACHE 1, and a statement-level BEFORE INSERT trigger on events assigns the
 * transaction id before any id is drawn. Warns when synchronous_commit is off.
 * @throws {SchemaNotMigratedError} @throws {SequenceCachedError} @throws {XidGuardMissingError}
 * @throws {PostgresUnsupportedError}
 */
export async function verifySchema(
  sql: Queryable,
  options?: VerifySchemaOptions,
): Promise<VerifySchemaResult> {
  requirePool(sql);
  const schema = resolveSchemaName(
    optionsObject(options, { fields: ['schema'], of: 'verifySchema()' }).schema,
  );
  const [server] = await valuesOf<ServerRow>(sql`
    select current_setting('server_version_num')::int,
           current_setting('synchronous_commit'),
           to_regclass(format('%I.events', ${schema}::text))::text,
           -- Text, not text[]: nothing depends on how the pool parses arrays (fetch_types: false).
           (select string_agg(t, ',') from unnest(array['events', 'consumers', 'dead_letters', 'audit', 'migrations']) t
            where to_regclass(format('%I.%I', ${schema}::text, t)) is null)`);
  if (!server) throw new Error('verifySchema: the server returned no row');
  const [serverVersionNum, synchronousCommit, table, missingTables] = server;
  if (serverVersionNum < MINIMUM_SERVER_VERSION_NUM) {
    throw new PostgresUnsupportedError(serverVersionNum, MINIMUM_SERVER_VERSION_NUM);
  }
  if (table === null || missingTables !== null) {
    throw new SchemaNotMigratedError(schema);
  }
  await refuseOlderSchema(sql, schema);

  const [sequence] = await valuesOf<SequenceRow>(sql`
    select s.seqrelid::regclass::text, s.seqcache::text
    from pg_sequence s
    where s.seqrelid = pg_get_serial_sequence(${table}, 'id')::regclass`);
  if (!sequence) throw new SchemaNotMigratedError(schema);
  const [sequenceName, cacheSize] = sequence;
  if (BigInt(cacheSize) !== 1n) {
    throw new SequenceCachedError(sequenceName, BigInt(cacheSize));
  }

  // Judge the trigger by what it does, not by its name: a statement-level BEFORE INSERT trigger
  // whose function takes the transaction id. tgtype bits: 1 = row level, 2 = before, 4 = insert.
  const triggers = await valuesOf<TriggerRow>(sql`
    select t.tgname, t.tgenabled
    from pg_trigger t
    join pg_proc p on p.oid = t.tgfoid
    where t.tgrelid = ${table}::regclass
      and not t.tgisinternal
      and t.tgtype & 7 = 6
      -- No backslash: with standard_conforming_strings off, the literal would read it as an escape.
      and p.prosrc ~ 'pg_current_xact_id[[:space:]]*[(]|txid_current[[:space:]]*[(]'`);
  if (triggers.length === 0) {
    throw new XidGuardMissingError(table, 'no BEFORE INSERT statement trigger assigns the transaction id');
  }
  if (triggers.every(([, enabled]) => enabled === 'D')) {
    throw new XidGuardMissingError(table, `trigger ${triggers[0]?.[0] ?? ''} is disabled`);
  }

  const warnings: string[] = [];
  if (triggers.every(([, enabled]) => enabled !== 'A')) {
    warnings.push(
      `${table}: the xid trigger does not fire under session_replication_role = replica; ` +
        `ALTER TABLE ${table} ENABLE ALWAYS TRIGGER ${triggers[0]?.[0] ?? ''}`,
    );
  }
  if (synchronousCommit === 'off') {
    warnings.push(
      'synchronous_commit is off: a server crash can take back commits that consumers already handled',
    );
  }
  return { schema, serverVersionNum, warnings };
}

/**
 * @throws {SchemaNotMigratedError} when the schema's last applied migration is older than this
 *   release's last one (a release upgraded without migrate()). A role that may not read the
 *   migrations table is not asked.
 */
async function refuseOlderSchema(sql: Queryable, schema: string): Promise<void> {
  const needed = (await loadMigrations()).at(-1)?.version ?? 0;
  // Asked first: a statement refused for want of the privilege would abort a caller's transaction.
  const [may] = await valuesOf<[read: boolean]>(
    sql`select has_table_privilege(format('%I.migrations', ${schema}::text), 'select')`,
  );
  if (!may?.[0]) return;
  const [row] = await valuesOf<[version: number | null]>(
    sql`select max(version) from ${sql(schema)}.migrations`,
  );
  const applied = row?.[0] ?? 0;
  if (applied < needed) throw new SchemaNotMigratedError(schema, { applied, needed });
}

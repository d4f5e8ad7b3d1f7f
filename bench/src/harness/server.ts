import postgres from 'postgres';

/** The settings RESULTS.md reports (read back from the server, whoever started it). */
const REPORTED_SETTINGS = [
  'fsync',
  'synchronous_commit',
  'full_page_writes',
  'shared_buffers',
  'max_wal_size',
  'autovacuum',
  'jit',
  'shared_preload_libraries',
  'max_connections',
] as const;

export interface ServerInfo {
  readonly version: string;
  readonly versionNum: number;
  readonly settings: Readonly<Record<string, string>>;
  readonly pgStatStatements: boolean;
}

/** The URL of another database on the same server. */
export function databaseUrl(serverUrl: string, database: string): string {
  const url = new URL(serverUrl);
  url.pathname = `/${database}`;
  return url.toString();
}

const quiet = { onnotice: () => undefined } as const;

/** A single-connection pool on the server's maintenance database, for creating and dropping databases. */
export function adminPool(serverUrl: string): postgres.Sql {
  return postgres(serverUrl, { max: 1, ...quiet });
}

export async function serverInfo(admin: postgres.Sql): Promise<ServerInfo> {
  const [row] = await admin<{ version: string; num: number }[]>`
    select current_setting('server_version') as version, current_setting('server_version_num')::int as num`;
  const settings: Record<string, string> = {};
  for (const name of REPORTED_SETTINGS) {
    const [s] = await admin<{ value: string | null }[]>`select current_setting(${name}, true) as value`;
    settings[name] = s?.value ?? '(unset)';
  }
  let pgStatStatements = false;
  try {
    await admin`create extension if not exists pg_stat_statements`;
    await admin`select count(*) from pg_stat_statements`;
    pgStatStatements = true;
  } catch {
    pgStatStatements = false;
  }
  return {
    version: row?.version ?? '?',
    versionNum: row?.num ?? 0,
    settings,
    pgStatStatements,
  };
}

export async function databaseExists(admin: postgres.Sql, name: string): Promise<boolean> {
  const rows = await admin`select 1 from pg_database where datname = ${name}`;
  return rows.length > 0;
}

/**
 * A fresh database, optionally cloned from a template. FILE_COPY copies the files after a
 * checkpoint instead of WAL-logging every block, so cloning the 1M-event log takes seconds and
 * leaves no dirty buffers behind for the run to write out.
 */
export async function createDatabase(
  admin: postgres.Sql,
  name: string,
  options: { template?: string; versionNum?: number } = {},
): Promise<void> {
  if (options.template === undefined) {
    await admin`create database ${admin(name)}`;
  } else if ((options.versionNum ?? 0) >= 150000) {
    await admin`create database ${admin(name)} template ${admin(options.template)} strategy file_copy`;
  } else {
    await admin`create database ${admin(name)} template ${admin(options.template)}`;
  }
}

export async function dropDatabase(admin: postgres.Sql, name: string): Promise<void> {
  await admin`drop database if exists ${admin(name)} with (force)`;
}

/** Drops the run databases a scenario process left behind (see runDatabase's deferDrop). */
export async function dropRunDatabases(admin: postgres.Sql): Promise<void> {
  const rows = await admin<
    { name: string }[]
  >`select datname as name from pg_database where datname like 'run\_%'`;
  for (const row of rows) await dropDatabase(admin, row.name);
}

/**
 * Drops every database the bench creates (run_*, tpl_*, including a half-built template). On a
 * DATABASE_URL server, before and after the run: a template left by an earlier run may hold an
 * older schema, and nothing of the bench's should stay behind (the embedded cluster is removed
 * as a whole).
 */
export async function dropBenchDatabases(admin: postgres.Sql): Promise<void> {
  const rows = await admin<{ name: string }[]>`
    select datname as name from pg_database where datname like 'run\_%' or datname like 'tpl\_%'`;
  for (const row of rows) await dropDatabase(admin, row.name);
}

export async function databaseOid(admin: postgres.Sql, name: string): Promise<number> {
  const [row] = await admin<
    { oid: number }[]
  >`select oid::int as oid from pg_database where datname = ${name}`;
  if (!row) throw new Error(`no database ${name}`);
  return row.oid;
}

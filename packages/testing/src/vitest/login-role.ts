import { randomBytes } from 'node:crypto';
import type { Sql } from '@sluice/core';
import { afterAll, beforeAll } from 'vitest';
import type { TestDatabase } from './test-database.js';

/**
 * A login role of this test file (`<prefix>_<random>`, so a row-level security policy can single it
 * out), created before its tests and dropped after them with what it owns: for tests that run a
 * dispatcher or an operator as a role other than the owner. `sql()` is a pool that connects as it.
 */
export function useLoginRole(db: TestDatabase, prefix: string, options: { max?: number } = {}) {
  const name = `${prefix}_${randomBytes(4).toString('hex')}`;
  const password = randomBytes(12).toString('hex');
  let pool: Sql | undefined;
  beforeAll(async () => {
    await db.sql.unsafe(`create role "${name}" login password '${password}'`);
    pool = db.connect({ user: name, password, max: options.max ?? 4 });
  });
  afterAll(async () => {
    await pool?.end({ timeout: 1 });
    await db.sql.unsafe(`drop owned by "${name}"; drop role if exists "${name}"`).catch(() => undefined);
  });
  return {
    name,
    password,
    sql: (): Sql => {
      if (!pool) throw new Error(`${name} connects once the tests run`);
      return pool;
    },
    /** Lets the role use `schema`: read and write its tables, draw from its sequences. */
    grant: (schema: string): Promise<unknown> =>
      db.sql.unsafe(`
        grant usage on schema "${schema}" to "${name}";
        grant select, insert, update, delete on all tables in schema "${schema}" to "${name}";
        grant usage, select on all sequences in schema "${schema}" to "${name}";`),
    /** How many of the role's sessions wait on an advisory lock (parked by a policy, say). */
    parked: async () => {
      const [row] = await db.sql<{ n: number }[]>`
        select count(*)::int as n from pg_stat_activity
        where usename = ${name} and wait_event_type = 'Lock' and wait_event = 'advisory'`;
      return row?.n ?? 0;
    },
  };
}

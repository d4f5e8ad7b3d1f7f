import { randomBytes } from 'node:crypto';
import postgres from 'postgres';
import { afterAll, inject, onTestFinished } from 'vitest';
import type { Sql } from '@sluice/core';
import { withDatabase } from '../database-url.js';
import type {} from './provided-context.js';

export interface TestDatabase {
  /** Name of this test file's database. */
  readonly name: string;
  readonly url: string;
  /** The Sluice schema, migrated. */
  readonly schema: string;
  /** A pool on this database (max 10 connections), closed after the file. */
  readonly sql: Sql;
  /** Another pool on this database (its own connections), closed after the file. */
  connect(options?: postgres.Options<Record<string, postgres.PostgresType>>): Sql;
}

const quiet = { onnotice: () => undefined } as const;

/**
 * Gives the calling test file its own database, cloned from the migrated template of the run's
 * global setup (`@sluice/testing/vitest/global-setup`), and drops it after the file. Call it at
 * module level: `const db = await useTestDatabase()`.
 */
export async function useTestDatabase(): Promise<TestDatabase> {
  const serverUrl = inject('sluiceServerUrl') as string | undefined;
  const template = inject('sluiceTemplateDatabase') as string | undefined;
  if (typeof serverUrl !== 'string' || typeof template !== 'string') {
    throw new Error(
      "useTestDatabase() needs the run's PostgreSQL: add globalSetup: ['@sluice/testing/vitest/global-setup'] " +
        "to the test section of your vitest config (see @sluice/testing's README)",
    );
  }
  const name = `sluice_test_${randomBytes(6).toString('hex')}`;
  const admin = postgres(serverUrl, { max: 1, ...quiet });
  try {
    await admin`create database ${admin(name)} template ${admin(template)}`;
  } finally {
    await admin.end();
  }
  const url = withDatabase(serverUrl, name);
  const pools: Sql[] = [];
  const connect = (options: postgres.Options<Record<string, postgres.PostgresType>> = {}): Sql => {
    const sql = postgres(url, { max: 10, ...quiet, ...options }) as unknown as Sql;
    pools.push(sql);
    return sql;
  };
  const sql = connect();

  afterAll(async () => {
    await Promise.all(pools.map((pool) => pool.end({ timeout: 5 })));
    const dropper = postgres(serverUrl, { max: 1, ...quiet });
    try {
      await dropper`drop database if exists ${dropper(name)} with (force)`;
    } finally {
      await dropper.end();
    }
  });

  return { name, url, schema: 'sluice', sql, connect };
}

/**
 * Sets `settings` on the test file's database (ALTER DATABASE … SET), for the sessions that open
 * from then on, until the calling test finishes: they are reset then.
 */
export async function setDatabaseSettings(
  db: TestDatabase,
  settings: Readonly<Record<string, string>>,
): Promise<void> {
  const names = Object.keys(settings);
  if (names.some((name) => !/^[a-z_]+$/i.test(name)))
    throw new Error(`not setting names: ${names.join(', ')}`);
  onTestFinished(async () => {
    for (const name of names) await db.sql.unsafe(`alter database "${db.name}" reset ${name}`);
  });
  for (const [name, value] of Object.entries(settings)) {
    await db.sql.unsafe(`alter database "${db.name}" set ${name} = '${value.replace(/'/g, "''")}'`);
  }
}

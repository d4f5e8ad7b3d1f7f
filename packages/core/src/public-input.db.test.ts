// Bad input to the package root's functions is refused with SLUICE_INVALID_OPTION (or the
// documented typed error), never a TypeError from inside Sluice or a raw driver error, and nothing
// reaches the database (docs/configuration.md: values are checked where they are passed).
import { freshSchema } from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import { describe, expect, test } from 'vitest';
import { append, transaction } from './append.js';
import { checkConnection } from './connect-timeout.js';
import { liveVersion } from './live-version.js';
import { silentLogger } from './logger.js';
import { prune } from './retention/prune.js';
import { migrate } from './schema/migrate.js';
import { verifySchema } from './schema/verify-schema.js';
import type { Sql, TransactionSql } from './sql-types.js';

const db = await useTestDatabase();
const invalid = (option: string) => ({ code: 'SLUICE_INVALID_OPTION', option });
const notAPool = {} as unknown as Sql;

async function schemaExists(schema: string): Promise<boolean> {
  const [row] = await db.sql<{ found: boolean }[]>`
    select exists (select 1 from pg_namespace where nspname = ${schema}) as found`;
  return row?.found === true;
}

describe('the public functions refuse bad input with a typed error', () => {
  test('options that are null are left out; options that are not objects are refused', async () => {
    const schema = await freshSchema(db.sql, 'input');
    // null as "nothing": the defaults (append's own checks still apply).
    expect(await transaction(db.sql, (tx) => append(tx, [], null as never))).toEqual([]);
    await expect(transaction(db.sql, (tx) => append(tx, [], 5 as never))).rejects.toMatchObject(
      invalid('options'),
    );
    await expect(prune(db.sql, null as never)).rejects.toMatchObject(invalid('before'));
    await expect(prune(db.sql, undefined as never)).rejects.toMatchObject(invalid('before'));
    await expect(prune(db.sql, 'soon' as never)).rejects.toMatchObject(invalid('options'));
    await expect(verifySchema(db.sql, { schema })).resolves.toBeDefined();
    await expect(verifySchema(db.sql, 7 as never)).rejects.toMatchObject(invalid('options'));
    await expect(liveVersion(db.sql, 'anyone', null as never)).resolves.toBeNull();
  });

  test('a misspelt option is refused, naming it, and nothing is written where it was not meant to go', async () => {
    const schema = await freshSchema(db.sql, 'input');
    const events = async () =>
      (await db.sql<{ n: number }[]>`select count(*)::int as n from sluice.events`)[0]?.n ?? -1;
    await migrate(db.sql, { logger: silentLogger });
    const before = await events();
    const misspelt = await transaction(db.sql, (tx) =>
      append(tx, [{ streamId: 's', type: 'T', data: {} }], { schem: schema } as never),
    ).catch((e: unknown) => e);
    expect(misspelt).toMatchObject(invalid('schem'));
    expect((misspelt as Error).message).toContain('is not an option of append()');
    expect(await events()).toBe(before); // not in the default schema either
    await expect(prune(db.sql, { before: 1n, shcema: schema } as never)).rejects.toMatchObject(
      invalid('shcema'),
    );
    await expect(
      migrate(db.sql, { schema: `${schema}_never`, loger: silentLogger } as never),
    ).rejects.toMatchObject(invalid('loger'));
    expect(await schemaExists(`${schema}_never`)).toBe(false);
    await expect(verifySchema(db.sql, { schemaName: schema } as never)).rejects.toMatchObject(
      invalid('schemaName'),
    );
    await expect(liveVersion(db.sql, 'a', { shema: schema } as never)).rejects.toMatchObject(
      invalid('shema'),
    );
  });

  test('a pool that is not one is named, before anything is sent', async () => {
    await expect(prune(notAPool, { before: 1n })).rejects.toMatchObject(invalid('sql'));
    await expect(migrate(notAPool, { schema: 'input_never' })).rejects.toMatchObject(invalid('sql'));
    await expect(verifySchema(notAPool)).rejects.toMatchObject(invalid('sql'));
    await expect(liveVersion(notAPool, 'a')).rejects.toMatchObject(invalid('sql'));
    await expect(checkConnection(notAPool)).rejects.toMatchObject(invalid('sql'));
    await expect(transaction(undefined as never, () => Promise.resolve(1))).rejects.toMatchObject(
      invalid('sql'),
    );
  });

  test('transaction() without a function opens no transaction', async () => {
    const before = await db.sql<
      { n: number }[]
    >`select count(*)::int as n from pg_stat_activity where state like 'idle in%'`;
    await expect(transaction(db.sql, undefined as never)).rejects.toMatchObject(invalid('fn'));
    const after = await db.sql<
      { n: number }[]
    >`select count(*)::int as n from pg_stat_activity where state like 'idle in%'`;
    expect(after[0]?.n).toBe(before[0]?.n);
  });

  test('migrate() checks its logger before it changes anything', async () => {
    for (const logger of ['x', {}]) {
      await expect(
        migrate(db.sql, { schema: 'input_logger', logger: logger as never }),
      ).rejects.toMatchObject(invalid('logger'));
    }
    expect(await schemaExists('input_logger')).toBe(false);
  });

  test('liveVersion() refuses a name no consumer can have and says a schema is not migrated', async () => {
    await expect(liveVersion(db.sql, undefined as never)).rejects.toMatchObject(invalid('name'));
    await expect(liveVersion(db.sql, 'a\u0000b')).rejects.toMatchObject(invalid('name'));
    await expect(liveVersion(db.sql, 'x', { schema: 'input_never_migrated' })).rejects.toMatchObject({
      code: 'SLUICE_SCHEMA_NOT_MIGRATED',
    });
  });

  test('checkConnection() refuses a timeout that is not 1 to 2^31 - 1 ms, and passes with one', async () => {
    for (const timeoutMs of [Number.NaN, -1, 0, 1.5, 2 ** 31, '5000']) {
      await expect(checkConnection(db.sql, timeoutMs as never)).rejects.toMatchObject(invalid('timeoutMs'));
    }
    await expect(checkConnection(db.sql, 2 ** 31 - 1)).resolves.toBeUndefined();
    await expect(checkConnection(db.sql)).resolves.toBeUndefined();
  });

  test('append() refuses a maxEventBytes below the smallest event ({} and {})', async () => {
    const schema = await freshSchema(db.sql, 'input');
    const event = { type: 't', streamId: 's', data: {} };
    await expect(
      transaction(db.sql, (tx: TransactionSql) => append(tx, [event], { schema, maxEventBytes: 3 })),
    ).rejects.toMatchObject(invalid('maxEventBytes'));
    const [stored] = await transaction(db.sql, (tx: TransactionSql) =>
      append(tx, [event], { schema, maxEventBytes: 4, wakeUp: 'none' }),
    );
    expect(stored?.id).toBe(1n);
    await migrate(db.sql, { schema, logger: silentLogger }); // nothing pending: no change
  });
});

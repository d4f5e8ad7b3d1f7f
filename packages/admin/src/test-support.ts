// Shared by this package's database tests (admin.db.test.ts and cli/cli.db.test.ts).
import type { Consumer, DispatcherOptions, Sql } from '@sluice/core';
import { freshSchema } from '@sluice/testing';
import { testDispatcher } from '@sluice/testing/vitest';

/**
 * A fresh schema with `consumers` registered by a test dispatcher that never re-arms a dead consumer
 * by itself (a test looks at it dead) and retries without delay.
 */
export async function registered(
  sql: Sql,
  consumers: readonly Consumer[],
  extra: Partial<DispatcherOptions> = {},
) {
  const schema = await freshSchema(sql, 'adm');
  const dispatcher = testDispatcher(sql, schema, consumers, { rearmCooldownMs: 3_600_000, ...extra });
  await dispatcher.ensureRegistered();
  return { schema, dispatcher };
}

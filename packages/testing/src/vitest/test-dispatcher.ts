import {
  createDispatcher,
  silentLogger,
  type Consumer,
  type Dispatcher,
  type DispatcherOptions,
  type Sql,
} from '@sluice/core';
import { onTestFinished } from 'vitest';
import { freshSchema } from '../consumer-row.js';
import { openTransaction, type OpenTransaction } from '../open-transaction.js';

/**
 * A dispatcher for one test: no LISTEN, no logs and retries without delay unless `extra` says
 * otherwise (tests count attempts pass by pass, with runOnce() or drainUntilIdle()); stopped when
 * the test finishes.
 */
export function testDispatcher(
  sql: Sql,
  schema: string,
  consumers: readonly Consumer[],
  extra: Partial<DispatcherOptions> = {},
): Dispatcher {
  const dispatcher = createDispatcher({
    sql,
    schema,
    consumers,
    retryDelayMs: 0,
    logger: silentLogger,
    listen: false,
    ...extra,
  });
  onTestFinished(() => dispatcher.stop());
  return dispatcher;
}

/**
 * A fresh schema of its own (see freshSchema) with `consumers` registered in it by a
 * {@link testDispatcher}: what most database tests start from.
 */
export async function registeredDispatcher(
  sql: Sql,
  consumers: readonly Consumer[],
  extra: Partial<DispatcherOptions> = {},
  prefix?: string,
): Promise<{ readonly schema: string; readonly dispatcher: Dispatcher }> {
  const schema = await freshSchema(sql, prefix);
  const dispatcher = testDispatcher(sql, schema, consumers, extra);
  await dispatcher.ensureRegistered();
  return { schema, dispatcher };
}

/** A transaction held open on a connection of `sql` (see openTransaction), rolled back after the test if still open. */
export async function heldTransaction(sql: Sql): Promise<OpenTransaction> {
  const transaction = await openTransaction(sql);
  onTestFinished(() => transaction.rollback());
  return transaction;
}

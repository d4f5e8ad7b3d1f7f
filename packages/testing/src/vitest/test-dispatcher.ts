import {
  createDispatcher,
  silentLogger,
  type Consumer,
  type Dispatcher,
  type DispatcherOptions,
  type Sql,
} from '@sluice/core';
import { onTestFinished } from 'vitest';

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

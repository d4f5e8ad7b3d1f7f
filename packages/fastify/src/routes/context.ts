import type { Admin } from '@sluice/admin';
import { InvalidOptionError, type Dispatcher } from '@sluice/core';
import type { ResolvedOps } from '../options.js';

/** What the ops route files need. */
export interface OpsContext {
  readonly admin: Admin;
  readonly dispatcher: Dispatcher;
  readonly ops: ResolvedOps;
  readonly isRunning: () => boolean;
  /** LISTEN is configured: its absence degrades health. */
  readonly listenExpected: boolean;
  /**
   * How many write actions may run at once. Each holds one of the admin pool's connections while
   * it waits for a row (up to lockTimeoutMs): fewer than the pool has, so reads and `/health`
   * always find a connection however many writes wait behind a long turn.
   */
  readonly writeSlots: number;
}

/**
 * The instance a request names, by the `?instance=` query or the body's `instanceId`: both may be
 * given only when they agree (a request that says two things is refused, not guessed at).
 * @throws {InvalidOptionError}
 */
export function instanceOf(
  query: { readonly instance?: string },
  body?: { readonly instanceId?: string },
): { instanceId?: string } {
  const fromBody = body?.instanceId;
  if (fromBody !== undefined && query.instance !== undefined && fromBody !== query.instance) {
    throw new InvalidOptionError('instanceId', 'and the instance query parameter name different instances');
  }
  const instanceId = fromBody ?? query.instance;
  return instanceId === undefined ? {} : { instanceId };
}

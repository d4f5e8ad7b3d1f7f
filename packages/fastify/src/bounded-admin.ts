import type { Admin } from '@sluice/admin';
import { settleWithin, TIMED_OUT } from '@sluice/core/internal';
import { OpsRequestError } from './http-errors.js';

/**
 * `admin` with every action bounded by `ms` (ops.requestTimeoutMs): one whose database does not
 * answer by then (a network that drops packets: neither an error nor an answer ever comes) fails
 * with SLUICE_DATABASE_UNAVAILABLE, and the ops request gets its 503. The action itself is left to
 * settle: a write may still take effect if the database answers later, which the message says.
 */
export function boundedAdmin(admin: Admin, ms: number): Admin {
  const bounded: Record<string, unknown> = { ...admin };
  for (const [name, action] of Object.entries(admin)) {
    if (typeof action !== 'function') continue;
    bounded[name] = async (...args: unknown[]) => {
      const running = (action as (...a: unknown[]) => Promise<unknown>)(...args);
      const outcome = await settleWithin(running, ms);
      if (outcome === TIMED_OUT) {
        throw new OpsRequestError(
          'SLUICE_DATABASE_UNAVAILABLE',
          `the database did not answer within ${ms} ms (ops.requestTimeoutMs); an action may still take ` +
            'effect if it answers later: check the audit before you retry',
        );
      }
      return outcome;
    };
  }
  return bounded as Admin;
}

import type { Admin } from '@sluice/admin';
import type { Logger } from '@sluice/core';
import { settleWithin, TIMED_OUT } from '@sluice/core/internal';
import { OpsRequestError } from './http-errors.js';

/**
 * An action whose database did not answer within ops.requestTimeoutMs: the request gets its 503,
 * while the action itself is left running (it may still take effect if the database answers).
 * `running` settles when it ends either way.
 */
export class DatabaseSilentError extends OpsRequestError {
  readonly running: Promise<unknown>;

  constructor(ms: number, running: Promise<unknown>) {
    super(
      'SLUICE_DATABASE_UNAVAILABLE',
      `the database did not answer within ${ms} ms (ops.requestTimeoutMs); the action may still be ` +
        'carried out if it answers later: check the audit (again later) before you retry',
    );
    this.running = running;
  }
}

/**
 * `admin` with every action bounded by `ms` (ops.requestTimeoutMs): one whose database does not
 * answer by then (a network that drops packets: neither an error nor an answer ever comes) fails
 * with a {@link DatabaseSilentError}, and the ops request gets its 503, and `connections` (the
 * admin's) are replaced. How the action ends after that is logged.
 */
export function boundedAdmin(
  admin: Admin,
  ms: number,
  logger: Logger,
  connections: { readonly generation: number; replace(generation: number): void },
): Admin {
  const bounded: Record<string, unknown> = { ...admin };
  for (const [name, action] of Object.entries(admin)) {
    if (typeof action !== 'function') continue;
    bounded[name] = async (...args: unknown[]) => {
      const generation = connections.generation;
      const running = (action as (...a: unknown[]) => Promise<unknown>)(...args);
      const outcome = await settleWithin(running, ms);
      if (outcome !== TIMED_OUT) return outcome;
      logger.warn(
        { action: name, waitedMs: ms },
        'sluice ops: the database did not answer in time; answered 503',
      );
      // Its connection may be gone silent (packets dropped without a close): the next requests go
      // to fresh connections, and this one is cut once it has had its time. Once for the pool the
      // action began on, however many of its requests time out.
      connections.replace(generation);
      const ended = running.then(
        () => {
          logger.warn(
            { action: name },
            'sluice ops: an action answered 503 (no answer in time) has completed since',
          );
        },
        (error: unknown) => {
          logger.info(
            { action: name, err: error },
            'sluice ops: an action answered 503 (no answer in time) has failed since',
          );
        },
      );
      throw new DatabaseSilentError(ms, ended);
    };
  }
  return bounded as Admin;
}

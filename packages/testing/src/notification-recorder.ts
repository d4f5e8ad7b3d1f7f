import { randomBytes } from 'node:crypto';
import type { Queryable, Sql } from '@sluice/core';

export interface NotificationRecorder {
  /** Every payload received so far, in arrival order. */
  readonly received: readonly string[];
  /** Resolves with the first payload (already received or arriving) that matches; rejects after `timeoutMs`. */
  next(predicate: (payload: string) => boolean, timeoutMs?: number): Promise<string>;
  /**
   * Sends a unique marker on the channel through `sender` (its own autocommit statement) and
   * resolves, once the marker is back, with the payloads received before it. PostgreSQL delivers
   * notifications in commit order, so anything committed before the marker is in the result:
   * "nothing was notified" is then a fact, not a timeout.
   */
  barrier(sender: Queryable, timeoutMs?: number): Promise<string[]>;
  stop(): Promise<void>;
}

/** LISTENs on `channel` (on its own connection of `sql`) and records every payload. */
export async function recordNotifications(sql: Sql, channel: string): Promise<NotificationRecorder> {
  const received: string[] = [];
  const waiters = new Set<{ predicate: (payload: string) => boolean; resolve: (payload: string) => void }>();
  const meta = await sql.listen(channel, (payload) => {
    received.push(payload);
    for (const waiter of waiters) {
      if (waiter.predicate(payload)) {
        waiters.delete(waiter);
        waiter.resolve(payload);
      }
    }
  });

  function next(predicate: (payload: string) => boolean, timeoutMs = 5000): Promise<string> {
    const seen = received.find(predicate);
    if (seen !== undefined) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const waiter = {
        predicate,
        resolve: (payload: string) => {
          clearTimeout(timer);
          resolve(payload);
        },
      };
      const timer = setTimeout(() => {
        waiters.delete(waiter);
        reject(
          new Error(
            `no matching notification on ${channel} within ${timeoutMs} ms; got ${JSON.stringify(received)}`,
          ),
        );
      }, timeoutMs);
      waiters.add(waiter);
    });
  }

  return {
    received,
    next,
    async barrier(sender, timeoutMs = 5000) {
      const marker = `barrier:${randomBytes(8).toString('hex')}`;
      await sender`select pg_notify(${channel}, ${marker})`;
      await next((payload) => payload === marker, timeoutMs);
      return received.slice(0, received.indexOf(marker)).filter((payload) => !payload.startsWith('barrier:'));
    },
    stop: () => meta.unlisten(),
  };
}

import { randomBytes } from 'node:crypto';
import { messageOf } from '../errors.js';
import { consoleLogger, type Logger } from '../logger.js';
import type { Sql } from '../sql-types.js';
import { wakeUpChannel } from './channel.js';

/**
 * Wakes dispatchers after appends committed: local subscribers (a dispatcher on the same pool)
 * are called at once; other processes get a NOTIFY sent from the pool in its own autocommit
 * statement, never inside a producer's transaction. NOTIFYs are rate-limited, not delayed: while
 * commits are sparse each one is announced at once; under a stream of them one NOTIFY per
 * coalescing interval carries all the commits since the previous one.
 *
 * Why not NOTIFY inside the producer's transaction: PostgreSQL serialises the commits of every
 * notifying transaction behind a cluster-wide lock, so concurrent appenders would commit one
 * after another (DESIGN §3).
 */
export interface WakeUpNotifier {
  readonly channel: string;
  /** Payload of this notifier's own NOTIFYs, so a local dispatcher (already woken) can ignore them. */
  readonly nonce: string;
  /** Wakes local subscribers now and other processes within the coalescing window. */
  poke(): void;
  /** Calls `listener` on every poke; returns the unsubscribe function. */
  subscribe(listener: () => void): () => void;
  /** Resolves once every poke so far has been sent (or has failed and been logged). */
  flush(): Promise<void>;
}

export interface WakeUpNotifierOptions {
  /**
   * While commits come faster than one per `quickMs`: at most one NOTIFY per this many ms, carrying
   * every commit since the previous one. @defaultValue 10
   */
  coalesceMs?: number;
  /**
   * While commits come less often than one per this many ms, each is announced at once (with up to
   * {@link NOTIFY_BURST} back to back after a quiet spell). @defaultValue 2
   */
  quickMs?: number;
  /** @defaultValue console */
  logger?: Logger;
}

/**
 * NOTIFYs that may go back to back: the size of a token bucket, refilled at one per `quickMs` until
 * it runs dry (commits outpace it), then at one per `coalesceMs` until it is full again.
 */
export const NOTIFY_BURST = 3;

const byPool = new WeakMap<Sql, Map<string, WakeUpNotifier>>();

/** The notifier of `schema` on this pool; created on first use, shared by appenders and dispatchers. */
export function wakeUpNotifierFor(
  sql: Sql,
  schema: string,
  options: WakeUpNotifierOptions = {},
): WakeUpNotifier {
  let notifiers = byPool.get(sql);
  if (!notifiers) {
    notifiers = new Map();
    byPool.set(sql, notifiers);
  }
  let notifier = notifiers.get(schema);
  if (!notifier) {
    notifier = createWakeUpNotifier(sql, schema, options);
    notifiers.set(schema, notifier);
  }
  return notifier;
}

function createWakeUpNotifier(sql: Sql, schema: string, options: WakeUpNotifierOptions): WakeUpNotifier {
  const channel = wakeUpChannel(schema);
  const nonce = randomBytes(12).toString('hex');
  const coalesceMs = options.coalesceMs ?? 10;
  const quickMs = options.quickMs ?? 2;
  const logger = options.logger ?? consoleLogger;
  const listeners = new Set<() => void>();
  let pending = false;
  let inFlight: Promise<void> | undefined;
  let timer: NodeJS.Timeout | undefined;
  let tokens = NOTIFY_BURST;
  let refilledAt = performance.now();
  // One token per this many ms: quickMs, or coalesceMs from the moment commits outpace quickMs
  // until the bucket is full again (they have slowed down).
  let refillMs = quickMs;
  let failing = false;

  function refill(): void {
    const now = performance.now();
    tokens = Math.min(NOTIFY_BURST, tokens + (now - refilledAt) / refillMs);
    refilledAt = now;
    if (tokens === NOTIFY_BURST) refillMs = quickMs;
  }

  function schedule(): void {
    if (inFlight || timer) return;
    refill();
    if (tokens < 1) {
      refillMs = coalesceMs;
      timer = setTimeout(
        () => {
          timer = undefined;
          send();
        },
        (1 - tokens) * refillMs,
      );
      timer.unref();
      return;
    }
    send();
  }

  function send(): void {
    if (!pending) return;
    pending = false;
    refill();
    tokens -= 1; // flush() may send early: the debt delays the next NOTIFY instead
    inFlight = sql`select pg_notify(${channel}, ${nonce})`.then(
      () => {
        if (failing) logger.info({ channel }, 'wake-up notifications are being sent again');
        failing = false;
      },
      (error: unknown) => {
        // Polling still delivers; log once per outage, not once per append (CONVENTIONS C10).
        if (!failing && !isPoolEnded(error)) {
          logger.warn(
            { channel, error: messageOf(error) },
            'could not send a wake-up notification; dispatchers in other processes fall back to polling',
          );
        }
        failing = true;
      },
    );
    void inFlight.finally(() => {
      inFlight = undefined;
      if (pending) schedule();
    });
  }

  return {
    channel,
    nonce,
    poke() {
      for (const listener of listeners) listener();
      pending = true;
      schedule();
    },
    subscribe(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    async flush() {
      for (;;) {
        if (timer) {
          clearTimeout(timer);
          timer = undefined;
          send();
        } else if (pending && !inFlight) {
          send();
        }
        if (!inFlight) return;
        await inFlight;
      }
    },
  };
}

function isPoolEnded(error: unknown): boolean {
  return typeof error === 'object' && error !== null && 'code' in error && error.code === 'CONNECTION_ENDED';
}

import { randomBytes } from 'node:crypto';
import { messageOf } from '../errors.js';
import { consoleLogger, type Logger } from '../logger.js';
import type { Sql } from '../sql-types.js';
import { wakeUpChannel } from './channel.js';

/**
 * Wakes dispatchers after appends committed: local subscribers (a dispatcher on the same pool)
 * are called at once; other processes get a NOTIFY sent from the pool in its own autocommit
 * statement, never inside a producer's transaction. A commit is notified at once unless
 * {@link STREAM_POKES} others came within the coalescing window before it; a denser stream shares
 * one NOTIFY per window. So sparse commits wake other processes without delay, a busy stream of
 * commits costs one NOTIFY per window however it arrives (writers' commits come in groups, one per
 * WAL flush, with gaps between groups), and NOTIFYs are never closer together than `quietMs`.
 *
 * Why not NOTIFY inside the producer's transaction: PostgreSQL serialises the commits of every
 * notifying transaction behind a cluster-wide lock, so concurrent appenders would commit one
 * after another (docs/design.md §3.3).
 */
export interface WakeUpNotifier {
  readonly channel: string;
  /** Payload of this notifier's own NOTIFYs, so a local dispatcher (already woken) can ignore them. */
  readonly nonce: string;
  /** Wakes local subscribers now and other processes at once or within the coalescing window. */
  poke(): void;
  /** Calls `listener` on every poke; returns the unsubscribe function. */
  subscribe(listener: () => void): () => void;
  /** Resolves once every poke so far has been sent (or has failed and been logged). */
  flush(): Promise<void>;
}

export interface WakeUpNotifierOptions {
  /**
   * A commit that 3 others preceded within this many ms waits for the next NOTIFY, sent at most
   * once per this many ms; sparser commits are notified at once (or by a NOTIFY already due).
   * @defaultValue 10
   */
  coalesceMs?: number;
  /** NOTIFYs are never closer together than this many ms. @defaultValue 2 */
  quietMs?: number;
  /** @defaultValue console */
  logger?: Logger;
}

/**
 * A commit is part of a stream, and shares the NOTIFY of its coalescing window, when this many
 * commits came within the window before it. Three let a steady 200 commits a second (5 ms apart)
 * be notified one by one, while eight writers' commits (in groups, one per WAL flush) are not.
 */
const STREAM_POKES = 3;

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
  const quietMs = Math.min(options.quietMs ?? 2, coalesceMs);
  const logger = options.logger ?? consoleLogger;
  const listeners = new Set<() => void>();
  let pending = false;
  /** A poke outside a stream is waiting: send without waiting for the coalescing window. */
  let urgent = false;
  /** When the last {@link STREAM_POKES} pokes came, oldest first. */
  const recentPokes: number[] = [];
  let inFlight: Promise<void> | undefined;
  let timer: NodeJS.Timeout | undefined;
  let lastSentAt = Number.NEGATIVE_INFINITY;
  let failing = false;

  function schedule(): void {
    if (inFlight || timer) return;
    const waitMs = lastSentAt + (urgent ? quietMs : coalesceMs) - performance.now();
    if (waitMs > 0) {
      timer = setTimeout(() => {
        timer = undefined;
        send();
      }, waitMs);
      timer.unref();
      return;
    }
    send();
  }

  function send(): void {
    if (!pending) return;
    pending = false;
    urgent = false;
    lastSentAt = performance.now();
    // The NOTIFY's transaction (it gets an xid, so it writes a commit record) does not wait for its
    // WAL flush: it would add one flush per NOTIFY to the writers' own, and delay the notification,
    // which PostgreSQL sends only once the commit is done. A crash can lose it: polling finds the
    // events all the same.
    inFlight = sql`
      select pg_notify(${channel}, ${nonce})
      from (select set_config('synchronous_commit', 'off', true)) as async_commit`.then(
      () => {
        if (failing) logger.info({ channel }, 'wake-up notifications are being sent again');
        failing = false;
      },
      (error: unknown) => {
        // Polling still delivers; log once per outage, not once per append
        // (CONVENTIONS.md#comments-logs-and-telemetry-names).
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
      const now = performance.now();
      const streamStart = recentPokes.length === STREAM_POKES ? recentPokes.shift() : undefined;
      if (streamStart === undefined || now - streamStart >= coalesceMs) urgent = true;
      recentPokes.push(now);
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

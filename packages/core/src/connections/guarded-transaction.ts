// Transactions that stay safe when their connection dies, on the postgres.js release users install
// (docs/operating.md, "Database client").
//
// postgres.js 3.4.9 keeps running a transaction's code after its connection closed, and what that
// code then sends goes to a connection object without a socket: the driver schedules the write for
// the next turn of the event loop and throws from there (the process stops), or leaves the
// connection unable to send anything again. Its own begin() sends such a statement itself: the
// ROLLBACK after the callback failed (it did fail: its statement met the closed connection), or the
// COMMIT after it returned. Statements a transaction had queued locally when the connection closed
// are never settled either.
//
// So a guarded transaction
// - ends as soon as one of its statements fails because the connection is gone, or begin() itself
//   fails: from then on no statement can be made through it, or through a savepoint of it, and an
//   await on one that was made earlier is rejected at once rather than waiting for ever;
// - once ended, never settles the callback it gave begin(), so the driver sends neither ROLLBACK nor
//   COMMIT on the dead connection (begin() itself has already failed with the connection's error,
//   which is what the caller sees). Should the connection turn out to be alive after all (an error
//   classified as a connection loss that was not one), the callback is settled after a few seconds
//   and the driver rolls the transaction back as usual.
import { isConnectionLoss } from '../dispatcher/classify-failure.js';
import type { Sql, TransactionSql } from '../sql-types.js';
import { TransactionAbandonedError } from './transaction-abandoned-error.js';

export { TransactionAbandonedError };

/** Whether a guarded transaction may still run statements; `ended` settles when it may not. */
export interface Liveness {
  readonly isEnded: boolean;
  readonly ended: Promise<void>;
  /** Ends the transaction: later statements throw, pending awaits reject. */
  end(): void;
}

function liveness(): Liveness {
  let resolve: () => void = () => undefined;
  const ended = new Promise<void>((r) => {
    resolve = r;
  });
  const live = {
    isEnded: false,
    ended,
    end() {
      if (live.isEnded) return;
      live.isEnded = true;
      resolve();
    },
  };
  return live;
}

/** After a connection-loss error, how long a callback stays unsettled waiting for begin() to fail. */
const SETTLE_AFTER_LOSS_MS = 5_000;

/**
 * Runs `fn` in a transaction of `sql` (postgres.js begin()) through a guarded transaction (see the
 * top of this file). `fn` also gets the transaction's liveness, to end it early. With
 * `guardStatements: false`, `fn` gets the transaction as it is (no per-statement check: for the
 * application's own transactions, whose statements are its business); the driver's own ROLLBACK
 * and COMMIT still never go to a connection known to be gone.
 * @throws the error of begin() or of `fn`; {@link TransactionAbandonedError} when `fn` failed
 *   because the transaction was ended
 */
export async function guardedBegin<T>(
  sql: Sql,
  fn: (tx: TransactionSql, live: Liveness) => Promise<T>,
  { guardStatements = true }: { guardStatements?: boolean } = {},
): Promise<T> {
  const live = liveness();
  let failedWith: { error: unknown } | undefined;
  const body = (tx: TransactionSql) =>
    new Promise<T>((resolve, reject) => {
      let result: Promise<T>;
      try {
        result = fn(guardStatements ? guardTransaction(tx, live) : tx, live);
      } catch (error) {
        // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- passed on as it is
        result = Promise.reject(error);
      }
      result.then(
        (value) => {
          if (!live.isEnded) resolve(value);
        },
        (error: unknown) => {
          failedWith = { error };
          if (!live.isEnded && !isConnectionLoss(error)) {
            // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- passed on as it is
            reject(error);
            return;
          }
          live.end();
          // The connection is gone: begin() fails with its error by itself, and a ROLLBACK would be
          // sent to a connection without a socket. Only if begin() has not failed after a while was
          // the connection alive after all: then let the driver roll back.
          const timer = setTimeout(() => {
            // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- passed on as it is
            if (!beginFailed) reject(error);
          }, SETTLE_AFTER_LOSS_MS);
          timer.unref();
        },
      );
    });
  let beginFailed = false;
  const begun = sql.begin(body);
  try {
    return (await begun) as T;
  } catch (error) {
    beginFailed = true;
    live.end();
    // The callback's own failure says more than begin()'s when it was not the connection's.
    if (failedWith && !isConnectionLoss(failedWith.error) && isConnectionLoss(error)) throw failedWith.error;
    throw error;
  }
}

const guarded = new WeakMap<object, Liveness>();

/** @throws {TransactionAbandonedError} when `tx` is a guarded transaction that has ended */
export function assertLive(tx: TransactionSql): void {
  if (guarded.get(tx)?.isEnded) throw new TransactionAbandonedError();
}

/**
 * Wraps a transaction (or savepoint) so that every statement made through it, or through a
 * savepoint of it, throws {@link TransactionAbandonedError} once `live` has ended, and every await
 * on one of its statements rejects when `live` ends first.
 */
export function guardTransaction(tx: TransactionSql, live: Liveness): TransactionSql {
  const check = () => {
    if (live.isEnded) throw new TransactionAbandonedError();
  };
  const proxy = new Proxy(tx, {
    apply(target, thisArg, args: unknown[]) {
      check();
      const made = Reflect.apply(target, thisArg, args) as unknown;
      return made instanceof Promise ? guardStatement(made, live) : made;
    },
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver) as unknown;
      if (property === 'savepoint') {
        return (...args: unknown[]) => {
          check();
          const last = args.length - 1;
          const body = args[last];
          if (typeof body === 'function') {
            // A savepoint's callback settles only while the transaction is live: the driver's
            // ROLLBACK TO after a failed callback must not go to a dead connection either.
            args[last] = (savepoint: TransactionSql) =>
              settleWhileLive(
                Promise.resolve().then(() =>
                  (body as (s: TransactionSql) => unknown)(guardTransaction(savepoint, live)),
                ),
                live,
              );
          }
          const done = Reflect.apply(value as (...a: unknown[]) => unknown, target, args) as Promise<unknown>;
          return untilEnded(done, live);
        };
      }
      if (property === 'unsafe' || property === 'file') {
        return (...args: unknown[]) => {
          check();
          const made = Reflect.apply<unknown, unknown[], unknown>(
            value as (...a: unknown[]) => unknown,
            target,
            args,
          );
          return made instanceof Promise ? guardStatement(made, live) : made;
        };
      }
      return value;
    },
  });
  guarded.set(proxy, live);
  return proxy;
}

/** A promise that settles as `promise` does while `live` is live, and never once it has ended. */
function settleWhileLive<T>(promise: Promise<T>, live: Liveness): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    promise.then(
      (value) => {
        if (!live.isEnded) resolve(value);
      },
      (error: unknown) => {
        if (isConnectionLoss(error)) live.end();
        // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- passed on as it is
        if (!live.isEnded) reject(error);
      },
    );
  });
}

/**
 * `promise`, or a {@link TransactionAbandonedError} as soon as `live` ends. Once `live` has ended,
 * `promise` is not even looked at: for a postgres.js query, awaiting it is what sends it.
 */
function untilEnded<T>(promise: Promise<T>, live: Liveness): Promise<T> {
  if (live.isEnded) return Promise.reject(new TransactionAbandonedError());
  return new Promise<T>((resolve, reject) => {
    promise.then(resolve, (error: unknown) => {
      if (isConnectionLoss(error)) live.end();
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- passed on as it is
      reject(error);
    });
    void live.ended.then(() => {
      reject(new TransactionAbandonedError());
    });
  });
}

/** The methods of a postgres.js query that return the query itself (chained before it runs). */
const CHAINED = new Set(['values', 'raw', 'simple', 'describe', 'execute']);

/**
 * A statement of a guarded transaction: awaiting it (then, catch, finally) checks the transaction
 * is live, and rejects when it ends first. Anything else, including its use as a fragment of
 * another statement, reaches the query itself.
 */
function guardStatement(statement: Promise<unknown>, live: Liveness): Promise<unknown> {
  const proxy: Promise<unknown> = new Proxy(statement, {
    get(target, property) {
      if (property === 'then') {
        return (onValue?: (v: unknown) => unknown, onError?: (e: unknown) => unknown) =>
          untilEnded(target, live).then(onValue, onError);
      }
      if (property === 'catch') {
        return (onError?: (e: unknown) => unknown) => untilEnded(target, live).catch(onError);
      }
      if (property === 'finally') {
        return (onFinally?: () => void) => untilEnded(target, live).finally(onFinally);
      }
      const value = Reflect.get(target, property, target) as unknown;
      if (typeof value === 'function' && typeof property === 'string' && CHAINED.has(property)) {
        return (...args: unknown[]) => {
          if (property === 'execute' && live.isEnded) throw new TransactionAbandonedError();
          const chained = Reflect.apply(value as (...a: unknown[]) => unknown, target, args);
          return chained === target ? proxy : chained;
        };
      }
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  return proxy;
}

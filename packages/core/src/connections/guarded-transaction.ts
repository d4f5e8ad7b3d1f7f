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
import { readFileSync } from 'node:fs';
import { isConnectionLoss } from '../dispatcher/classify-failure.js';
import type { Sql, TransactionSql } from '../sql-types.js';
import { TransactionAbandonedError, TransactionControlError } from '../errors.js';
import { PIPELINED, TransactionConnectionClosedError, type Pipelined } from './pipelined-begin.js';
import { transactionEndIn } from './transaction-end.js';

/** Whether a guarded transaction may still run statements; `ended` settles when it may not. */
export interface Liveness {
  readonly isEnded: boolean;
  readonly ended: Promise<void>;
  /** When (performance.now()) a statement of the transaction last got its answer; when it began before that. */
  readonly answeredAt: number;
  /** Ends the transaction: later statements throw, pending awaits reject. */
  end(): void;
}

interface GuardedLiveness extends Liveness {
  /** Rejects with {@link ABANDONED} once ended; raced by every statement that is awaited. */
  readonly abandoned: Promise<never>;
  /** A statement failed: a connection loss ends the transaction. Passes the error on. */
  readonly failed: (error: unknown) => never;
  /** A statement got its answer: passes its value on. */
  readonly answered: (value: unknown) => unknown;
  /** The statements of the transaction that failed otherwise (refused by the server or the driver), the last one's error. */
  readonly refused: { count: number; last: unknown };
}

/**
 * What an await on a statement of an ended transaction rejects with. One instance for every
 * transaction: most turns end with nothing awaiting (their own end ends them), and an error made
 * for each would cost a stack trace per turn.
 */
const ABANDONED = new TransactionAbandonedError();

function liveness(): GuardedLiveness {
  let resolve: () => void = () => undefined;
  let reject: (error: unknown) => void = () => undefined;
  const ended = new Promise<void>((r) => {
    resolve = r;
  });
  const abandoned = new Promise<never>((_, r) => {
    reject = r;
  });
  abandoned.catch(() => undefined); // raced by the statements that are awaited; none may be
  const live: GuardedLiveness = {
    isEnded: false,
    ended,
    answeredAt: performance.now(),
    abandoned,
    end() {
      if (live.isEnded) return;
      (live as { isEnded: boolean }).isEnded = true;
      resolve();
      reject(ABANDONED);
    },
    answered: (value: unknown) => {
      (live as { answeredAt: number }).answeredAt = performance.now();
      return value;
    },
    failed: (error: unknown) => {
      (live as { answeredAt: number }).answeredAt = performance.now();
      if (isConnectionLoss(error)) live.end();
      else {
        live.refused.count += 1;
        live.refused.last = error;
      }
      throw error;
    },
    refused: { count: 0, last: undefined },
  };
  return live;
}

/** After a connection-loss error, how long a callback stays unsettled waiting for begin() to fail. */
const SETTLE_AFTER_LOSS_MS = 5_000;

/**
 * Runs `fn` in a transaction of `sql` (postgres.js begin()) through a guarded transaction (see the
 * top of this file). `fn` also gets the transaction's liveness, to end it early. A statement that
 * would end the transaction is refused before it is sent ({@link TransactionControlError}) when the
 * application makes it: through a savepoint of `tx` (where a transactional handler runs), and with
 * `applicationCode`, through `tx` itself (transaction()). Sluice's own statements are not read.
 * @throws the error of begin() or of `fn`; {@link TransactionAbandonedError} when `fn` failed
 *   because the transaction was ended
 */
export async function guardedBegin<T>(
  sql: Sql,
  fn: (tx: TransactionSql, live: Liveness) => Promise<T>,
  { applicationCode = false }: { applicationCode?: boolean } = {},
): Promise<T> {
  const live = liveness();
  let failedWith: { error: unknown } | undefined;
  const body = (tx: TransactionSql) =>
    new Promise<T>((resolve, reject) => {
      let result: Promise<T>;
      try {
        result = fn(guardTransaction(tx, live, applicationCode), live);
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
          if (!live.isEnded && !connectionGone(tx, error)) {
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
  // Sluice's own transactions run at READ COMMITTED whatever the database's default says: the gap
  // proof reads each statement's own snapshot (docs/design.md §5), and a turn's row lock under
  // REPEATABLE READ fails at every row another turn changed since its snapshot.
  const begun = applicationCode ? sql.begin(body) : sql.begin('isolation level read committed', body);
  try {
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-type-assertion -- postgres.js 3's types need it
    return (await begun) as T;
  } catch (error) {
    beginFailed = true;
    live.end();
    // The callback's own failure says more than begin()'s when it was not the connection's.
    if (failedWith && !isConnectionLoss(failedWith.error) && isConnectionLoss(error)) throw failedWith.error;
    throw error;
  }
}

const guarded = new WeakMap<object, GuardedLiveness>();

/** @throws {TransactionAbandonedError} when `tx` is a guarded transaction that has ended */
export function assertLive(tx: TransactionSql): void {
  if (isEnded(tx)) throw new TransactionAbandonedError();
}

/**
 * Whether `tx` is a guarded transaction that has ended: a statement of it met the loss of its
 * connection, begin() failed, or its owner ended it. An error a handler throws with a connection
 * error's code (its own HTTP call's ECONNRESET) does not say the transaction's connection is gone.
 */
export function isEnded(tx: TransactionSql): boolean {
  return guarded.get(tx)?.isEnded === true;
}

/**
 * How many statements of the guarded transaction `tx` (or of a savepoint of it) failed other than
 * by a connection loss so far, and the last one's error: a caller that sees the count grow while code it does
 * not control ran (a transactional handler) can check that the transaction is still usable.
 */
export function refusedStatements(tx: TransactionSql): { readonly count: number; readonly last: unknown } {
  return guarded.get(tx)?.refused ?? { count: 0, last: undefined };
}

type AnyFunction = (...args: unknown[]) => unknown;
type Handler = AnyFunction | null | undefined;

/**
 * Wraps a transaction (or savepoint) so that every statement made through it, or through a
 * savepoint of it, throws {@link TransactionAbandonedError} once `live` has ended, and every await
 * on one of its statements rejects when `live` ends first. With `readText`, a statement that would
 * end the transaction is refused before it is sent; a savepoint's statements always are. The
 * wrapper is a function with the transaction's own properties (postgres.js sets them on its
 * transaction function), so a statement costs one call more, not a proxy trap on every property read.
 * Over a pipelined transaction (a turn's), the wrapper makes the statement on its reserved
 * connection itself, refusing it as the pipelined transaction would once the connection is gone.
 */
function guardTransaction(tx: TransactionSql, live: GuardedLiveness, readText: boolean): TransactionSql {
  const pipelined = (tx as { [PIPELINED]?: Pipelined })[PIPELINED];
  /** `fn`, a statement maker of `tx` (called on `self`, else on its own `this`), guarded. */
  const statements = (fn: AnyFunction, self: unknown, textOf: (args: unknown[]) => unknown) =>
    function guardedStatement(this: unknown, ...args: unknown[]) {
      if (live.isEnded) throw new TransactionAbandonedError();
      if (readText) refuseTransactionEnd(textOf(args));
      if (pipelined?.state.gone === true) throw new TransactionConnectionClosedError();
      const made = Reflect.apply(fn, self ?? this, args);
      if (made instanceof Promise) {
        // The query's awaits (then, catch, finally) and execute() go through the guard's: shared
        // methods set on the query object, so nothing stands between the driver and the query it
        // reads, and nothing is allocated per statement.
        const query = made as unknown as GuardedQuery;
        query[LIVE] = live;
        query.then = guardedThen;
        query.catch = guardedCatch;
        query.finally = guardedFinally;
        if (typeof query.execute === 'function') query.execute = guardedExecute;
      }
      return made;
    };
  const wrapper = statements(pipelined?.connection ?? tx, undefined, (args) => {
    const first = args[0];
    return Array.isArray(first) && 'raw' in first ? templateText(first, args.slice(1)) : undefined;
  });
  Object.assign(wrapper, tx, {
    // The reserved connection stays the guard's: a handler's ctx.tx does not carry it.
    [PIPELINED]: undefined,
    unsafe: statements(Reflect.get(tx, 'unsafe') as AnyFunction, tx, (args) => args[0]),
    file: statements(Reflect.get(tx, 'file') as AnyFunction, tx, (args) => fileText(args[0])),
    savepoint(...args: unknown[]) {
      if (live.isEnded) throw new TransactionAbandonedError();
      const last = args.length - 1;
      const body = args[last];
      /** The callback's own run, once the driver has called it. */
      let running: Promise<unknown> | undefined;
      if (typeof body === 'function') {
        // A savepoint's callback settles only while the transaction is live: the driver's
        // ROLLBACK TO after a failed callback must not go to a dead connection either.
        args[last] = (savepoint: TransactionSql) => {
          running = Promise.resolve().then(() =>
            (body as AnyFunction)(guardTransaction(savepoint, live, true)),
          );
          return settleWhileLive(running, live, savepoint);
        };
      }
      const done = Reflect.apply(Reflect.get(tx, 'savepoint') as AnyFunction, tx, args) as Promise<unknown>;
      // The callback's own error (a handler's ECONNRESET) ends nothing while a pipelined
      // transaction says its connection is open.
      const failed = (error: unknown): never => {
        if (!isConnectionLoss(error) || connectionGone(tx, error)) return live.failed(error);
        throw error;
      };
      // Once the transaction has ended, the savepoint fails, but not before its callback has
      // returned: a transactional handler running in it when the connection died finishes first,
      // and the turn that awaits it (and stop() behind the turn) with it. Its statements fail at
      // once; the handler's own work is bounded by its caller (handlerTimeoutMs).
      const abandoned = live.abandoned.catch(async (error: unknown) => {
        await running?.catch(() => undefined);
        throw error;
      });
      return Promise.race([done.then(undefined, failed), abandoned]);
    },
  });
  const guardedTx = wrapper as unknown as TransactionSql;
  guarded.set(guardedTx, live);
  return guardedTx;
}

/**
 * @throws {TransactionControlError} when `text` holds a statement that ends the transaction
 *   (connections/transaction-end.ts)
 */
function refuseTransactionEnd(text: unknown): void {
  if (typeof text !== 'string') return;
  const ends = transactionEndIn(text);
  if (ends !== undefined) throw new TransactionControlError(ends);
}

/**
 * A template's text as the server will read it: its fragments (queries of any pool, unsafe() texts,
 * nested templates: postgres.js keeps their `strings`) written in, its parameters standing as 0.
 */
function templateText(strings: readonly string[], values: readonly unknown[], depth = 0): string {
  let text = strings[0] ?? '';
  for (let i = 1; i < strings.length; i++)
    text += ` ${fragmentText(values[i - 1], depth)} ${strings[i] ?? ''}`;
  return text;
}

function fragmentText(value: unknown, depth: number): string {
  if (typeof value !== 'object' || value === null || depth > 8) return '0';
  const { strings, args } = value as { strings?: unknown; args?: unknown };
  if (typeof strings === 'string') return strings;
  if (!Array.isArray(strings) || !strings.every((part) => typeof part === 'string')) return '0';
  return templateText(strings, Array.isArray(args) ? args : [], depth + 1);
}

/** The text of a SQL file `file()` is given, when it can be read (else the driver says why). */
function fileText(path: unknown): string | undefined {
  try {
    return typeof path === 'string' ? readFileSync(path, 'utf8') : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Whether `error`, which code made through `tx` failed with, means that the connection of `tx` is
 * gone. A pipelined transaction (connections/pipelined-begin.ts, a turn's) knows: a connection
 * error's code says nothing there (a handler's own HTTP call fails with ECONNRESET too). On the
 * driver's own begin() the code is all there is to go by.
 */
function connectionGone(tx: TransactionSql, error: unknown): boolean {
  const pipelined = (tx as { [PIPELINED]?: Pipelined })[PIPELINED];
  return pipelined === undefined ? isConnectionLoss(error) : pipelined.state.gone;
}

/**
 * A promise that settles as `promise` (a savepoint's callback, on `inner`) does while `live` is
 * live, and never once it has ended: a failure that means the connection is gone
 * ({@link connectionGone}) ends it.
 */
function settleWhileLive<T>(promise: Promise<T>, live: GuardedLiveness, inner: TransactionSql): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    promise.then(
      (value) => {
        if (!live.isEnded) resolve(value);
      },
      (error: unknown) => {
        if (connectionGone(inner, error)) live.end();
        // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- passed on as it is
        if (!live.isEnded) reject(error);
      },
    );
  });
}

/** The transaction a guarded statement belongs to (a property of the query object). */
const LIVE = Symbol('sluice.liveness');

/** A postgres.js query (a promise that sends itself when first awaited), with its guard. */
interface GuardedQuery {
  [LIVE]: GuardedLiveness;
  then: (onValue?: Handler, onError?: Handler) => Promise<unknown>;
  catch: (onError?: Handler) => Promise<unknown>;
  finally: (onFinally?: Handler) => Promise<unknown>;
  execute?: () => unknown;
}

function guardedThen(this: GuardedQuery, onValue?: Handler, onError?: Handler): Promise<unknown> {
  const live = this[LIVE];
  if (live.isEnded) return live.abandoned.then(onValue, onError);
  // The query's own then (postgres.js' Query.prototype): it sends the query.
  const settled = (Object.getPrototypeOf(this) as GuardedQuery).then.call(this, live.answered, live.failed);
  return Promise.race([settled, live.abandoned]).then(onValue, onError);
}

function guardedCatch(this: GuardedQuery, onError?: Handler): Promise<unknown> {
  return guardedThen.call(this, undefined, onError);
}

function guardedFinally(this: GuardedQuery, onFinally?: Handler): Promise<unknown> {
  return guardedThen.call(
    this,
    (value: unknown) => {
      onFinally?.();
      return value;
    },
    (error: unknown) => {
      onFinally?.();
      throw error;
    },
  );
}

function guardedExecute(this: GuardedQuery): GuardedQuery {
  if (this[LIVE].isEnded) throw new TransactionAbandonedError();
  (Object.getPrototypeOf(this) as GuardedQuery).execute?.call(this);
  return this;
}

// A transaction whose BEGIN goes out with its first statements (docs/design.md §4.3: no round trip
// waits on BEGIN alone), on the postgres.js release users install.
//
// postgres.js 3.4.9's begin() sends BEGIN and waits for its answer before it calls the callback, so
// a turn's row lock always waited one round trip for BEGIN. Here the transaction runs on a
// connection reserved from Sluice's own pool: BEGIN is sent, and the callback is called at once,
// so the statements it makes first are written behind BEGIN on the same connection and answered
// in order. The rest is what begin() does: COMMIT when the callback returns, ROLLBACK when it
// throws, savepoints on request; and what Sluice's guarded transactions need on a dying
// connection (connections/guarded-transaction.ts):
// - the pool reports every connection that closes; from then on no statement is sent through a
//   transaction of that pool (postgres.js would write it from a timer that throws: the process
//   stops), the transaction fails at once, and its connection is never handed back (3.4.9 would
//   put a closed reserved connection back as open). The pool is replaced on any close and cut
//   once its work has settled (own-connections.ts), so a healthy connection of it that a
//   transaction abandons this way is closed with it, and the server rolls that transaction back.
import type { ReservedSql, Sql, TransactionSql } from '../sql-types.js';
import { isConnectionLoss } from '../dispatcher/classify-failure.js';

/** Tells a transaction that a connection of its pool closed. */
export interface PoolCloses {
  /** Calls `onClose` at the next close of a connection of the pool; returns its unsubscription. */
  listen(onClose: () => void): () => void;
}

/** A transaction's connection closed (or another of its pool's did): nothing more is sent. */
export class TransactionConnectionClosedError extends Error {
  readonly code = 'CONNECTION_CLOSED';

  constructor() {
    super("a connection of the transaction's pool closed: the transaction was abandoned (CONNECTION_CLOSED)");
    this.name = 'TransactionConnectionClosedError';
  }
}

type AnyFunction = (...args: unknown[]) => unknown;

/**
 * What a guarded transaction above a pipelined one reads: the reserved connection, to make its
 * statements on it itself (one wrapper per statement, not two), and the transaction's answer to
 * "is my connection gone?" (the pool reported its close). An error with a connection error's code
 * that the transaction's code throws (a handler's own HTTP call) says nothing about this connection.
 */
export const PIPELINED = Symbol('sluice.pipelined');

/** A pipelined transaction's connection and its state (see {@link PIPELINED}). */
export interface Pipelined {
  readonly connection: ReservedSql;
  readonly state: { readonly gone: boolean };
}

/**
 * Pools whose connection has opened. postgres.js 3.4.9 never answers a reserve() that opens a
 * connection of a pool without `fetch_types` (the connection forgets the reservation once it is
 * ready): a pool's first reservation is made once a statement has opened its connection.
 */
const opened = new WeakSet<Sql>();

/** Runs `fn` in a transaction on a connection reserved from `sql`, BEGIN pipelined with `fn`'s first statements. */
export async function pipelinedBegin<T>(
  sql: Sql,
  closes: PoolCloses,
  fn: (tx: TransactionSql) => T | Promise<T>,
  /** What follows BEGIN, as begin()'s first argument: 'isolation level read committed'. */
  options = '',
): Promise<T> {
  if (!opened.has(sql)) {
    await sql`select 1`;
    opened.add(sql);
  }
  const connection = await sql.reserve();
  const state = { gone: false };
  let abandon: (error: Error) => void = () => undefined;
  const abandoned = new Promise<never>((_, reject) => {
    abandon = reject;
  });
  abandoned.catch(() => undefined);
  const unsubscribe = closes.listen(() => {
    state.gone = true;
    abandon(new TransactionConnectionClosedError());
  });
  const send = <R>(statement: Promise<R>): Promise<R> => {
    if (state.gone) return abandoned;
    return Promise.race([statement, abandoned]);
  };
  const tx = transactionOn(connection, state);
  let bodyError: unknown;
  try {
    // As the driver's begin() does with its options: words only (a constant of Sluice's, in fact).
    const words = options.replace(/[^a-z ]/gi, '');
    const begin = words === '' ? connection`begin` : connection.unsafe(`begin ${words}`);
    begin.catch(() => undefined);
    (begin as unknown as { execute: () => unknown }).execute(); // sent now, before fn's statements
    let result: T;
    try {
      const body = (async () => fn(tx))();
      body.catch(() => undefined);
      await send(begin);
      result = await send(body);
    } catch (error) {
      bodyError = error;
      // Whether the connection is gone is the pool's word (state.gone), not the error's code: the
      // body's error may be another connection's, or a handler's own HTTP call's.
      if (!state.gone) await send(connection`rollback`).catch(() => undefined);
      throw error;
    }
    // As with begin(): a transaction one of whose statements failed is rolled back by this COMMIT,
    // silently; the caller learns it from that statement (a turn awaits its last writes).
    await send(connection`commit`);
    return result;
  } catch (error) {
    // BEGIN or COMMIT met a lost connection (before the pool said so, should it ever).
    if (isConnectionLoss(error) && error !== bodyError) state.gone = true;
    throw error;
  } finally {
    unsubscribe();
    // A connection that closed (or may have) stays out of the pool's open connections.
    if (!state.gone) connection.release();
  }
}

/**
 * The reserved connection as a transaction: the connection's own tagged function and helpers,
 * with savepoints (SAVEPOINT, and ROLLBACK TO when the callback throws, as begin() does) and no
 * prepare. A statement is refused once the pool has reported a close, or once its own SAVEPOINT or
 * ROLLBACK TO met a lost connection (`state.gone`).
 */
function transactionOn(connection: ReservedSql, state: { gone: boolean }): TransactionSql {
  const isGone = () => state.gone;
  /** Sends one of the transaction's own statements; a connection loss it meets is the transaction's. */
  const own = async (statement: Promise<unknown>): Promise<void> => {
    try {
      await statement;
    } catch (error) {
      if (isConnectionLoss(error)) state.gone = true;
      throw error;
    }
  };
  let savepoints = 0;
  const tx = function transaction(this: unknown, ...args: unknown[]) {
    if (state.gone) throw new TransactionConnectionClosedError();
    return Reflect.apply(connection as unknown as AnyFunction, this, args);
  };
  Object.assign(tx, connection, {
    async savepoint(nameOrFn: unknown, maybeFn?: unknown) {
      const body = (typeof nameOrFn === 'function' ? nameOrFn : maybeFn) as (sp: TransactionSql) => unknown;
      const name = `s${savepoints++}${typeof nameOrFn === 'string' ? `_${nameOrFn.replace(/[^a-z0-9_]/gi, '')}` : ''}`;
      if (state.gone) throw new TransactionConnectionClosedError();
      await own(connection`savepoint ${connection(name)}`);
      try {
        return await body(tx as unknown as TransactionSql);
      } catch (error) {
        // Whether the connection is gone is the pool's word (or this transaction's own statements'),
        // not the error's code: a handler's own ECONNRESET is rolled back.
        if (!isGone()) await own(connection`rollback to ${connection(name)}`);
        throw error;
      }
    },
    prepare() {
      throw new Error('a turn cannot prepare its transaction (PREPARE TRANSACTION)');
    },
    release: undefined,
    [PIPELINED]: { connection, state } satisfies Pipelined,
  });
  return tx as unknown as TransactionSql;
}

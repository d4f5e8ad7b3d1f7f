import type { TransactionSql } from '../sql-types.js';

/**
 * The turn's transaction ended under code that was still running: its connection died (postgres.js
 * settles `begin()` as soon as the socket closes, while the callback may be inside a handler).
 * Nothing of that turn may run any more: a statement would go to whatever session the pool opens
 * next on that connection, outside the transaction and its lock, and a handler call would race the
 * next turn of the same consumer.
 */
export class TurnAbandonedError extends Error {
  constructor() {
    super("the turn's transaction has ended (its connection was lost); the rest of the turn is abandoned");
    this.name = 'TurnAbandonedError';
  }
}

interface Liveness {
  ended: boolean;
}

const liveness = new WeakMap<object, Liveness>();

/**
 * Wraps a turn's transaction so that every statement made through it, or through a savepoint of
 * it, throws {@link TurnAbandonedError} once `end()` was called.
 */
export function guardTurnTransaction(tx: TransactionSql): { tx: TransactionSql; end: () => void } {
  const live: Liveness = { ended: false };
  return {
    tx: guard(tx, live),
    end: () => {
      live.ended = true;
    },
  };
}

/** @throws {TurnAbandonedError} when `tx` is a guarded turn transaction that has ended */
export function assertTurnLive(tx: TransactionSql): void {
  if (liveness.get(tx)?.ended) throw new TurnAbandonedError();
}

function guard(tx: TransactionSql, live: Liveness): TransactionSql {
  const check = () => {
    if (live.ended) throw new TurnAbandonedError();
  };
  const guarded = new Proxy(tx, {
    apply(target, thisArg, args: unknown[]) {
      check();
      return Reflect.apply(target, thisArg, args) as unknown;
    },
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver) as unknown;
      if (property === 'savepoint') {
        return (...args: unknown[]) => {
          check();
          const last = args.length - 1;
          const body = args[last];
          if (typeof body === 'function')
            args[last] = (savepoint: TransactionSql) =>
              (body as (s: TransactionSql) => unknown)(guard(savepoint, live));
          return Reflect.apply(value as (...a: unknown[]) => unknown, target, args);
        };
      }
      if (property === 'unsafe' || property === 'file') {
        return (...args: unknown[]) => {
          check();
          return Reflect.apply(value as (...a: unknown[]) => unknown, target, args);
        };
      }
      return value;
    },
  });
  liveness.set(guarded, live);
  return guarded;
}

// The connections Sluice opens for itself (docs/operating.md, "Database client").
//
// The dispatcher does not run its turns, pre-checks and bookkeeping on the application's pool: it
// opens its own, from the same connection options, with the settings it needs. That pool
// - does not fetch array types when a connection starts (postgres.js 3.4.9 does not await that
//   fetch: a backend killed during it stops the process); Sluice never needs them, and handlers
//   given a transaction of this pool use the ones the application's pool fetched;
// - is replaced by a fresh one as soon as any of its connections closes unexpectedly. In 3.4.9 a
//   connection that closes while a write of it waits for the next turn of the event loop keeps a
//   cancelled timer and the unsent bytes, and never sends anything again: every reconnect of that
//   connection ends in CONNECT_TIMEOUT. One that closes while a statement is running keeps that
//   statement as current, and ending the pool waits for it until its timeout. A replaced pool
//   takes no new statements; once the transactions and statements Sluice runs on it have settled
//   (or after `retireAfterMs`), its connections are cut;
// - is sized for Sluice's own work (turns, turn starts, pre-checks), so the application's
//   requests and handlers never wait on it, nor it on them;
// - names its connections (application_name), so an operator can tell them from the app's;
// - applies no `transform` of the application's pool to the rows it reads.
import postgres from 'postgres';
import type { Sql } from '../sql-types.js';

export interface OwnConnectionsSettings {
  /** Connections at most. */
  readonly max: number;
  /** application_name of every connection (PostgreSQL keeps at most 63 bytes). */
  readonly applicationName: string;
  /** A replaced pool's transactions and statements get this long to settle before it is cut. */
  readonly retireAfterMs: number;
}

export interface OwnConnections {
  /** Always the current pool (a stable handle: calls go to whichever pool is current). */
  readonly sql: Sql;
  /** How many times the pool was replaced after a connection closed. */
  readonly replacements: number;
  /** Ends the current pool and every replaced one still settling. */
  end(): Promise<void>;
}

type Options = postgres.Options<Record<string, postgres.PostgresType>>;

/** One postgres.js pool, with what Sluice has running on it. */
interface Pool {
  readonly sql: Sql;
  inFlight: number;
  readonly whenIdle: (() => void)[];
}

/**
 * Opens Sluice's own pool from `template`'s connection options (host, port, database, user,
 * password, ssl, prepare, transforms…), overriding what Sluice needs (see the top of this file).
 */
export function openOwnConnections(template: Sql, settings: OwnConnectionsSettings): OwnConnections {
  const base = template.options as unknown as Record<string, unknown>;
  const retiring = new Set<Promise<void>>();
  let replacements = 0;
  let ended = false;

  const create = (): Pool => {
    const options = {
      ...base,
      // A retry counter of its own. The array types are the template's: this pool never fetches
      // them, but a transactional consumer's handlers get its connections as `ctx.tx`, and must
      // bind and read arrays as they do on the application's pool. postgres.js keeps them in
      // `shared.typeArrayMap` and in the parsers and serializers, which `...base` shares already.
      shared: {
        retries: 0,
        typeArrayMap: (base['shared'] as { typeArrayMap?: object } | undefined)?.typeArrayMap ?? {},
      },
      // Rows as PostgreSQL names them: Sluice's statements read their columns by name, and a pool
      // with `transform: postgres.camel` (say) would rename them under Sluice. So `ctx.tx` has no
      // transform either (docs/configuration.md, `transactional`).
      transform: {
        undefined: (base['transform'] as { undefined?: unknown } | undefined)?.undefined,
        column: {},
        value: {},
        row: {},
      },
      max: settings.max,
      fetch_types: false,
      connection: {
        ...(base['connection'] as Record<string, unknown> | undefined),
        application_name: settings.applicationName.slice(0, 63),
      },
      onclose: () => {
        if (pool === current && !ended) replace();
      },
    };
    const pool: Pool = {
      sql: postgres(options as unknown as Options),
      inFlight: 0,
      whenIdle: [],
    };
    return pool;
  };

  let current = create();

  function replace(): void {
    const old = current;
    current = create();
    replacements += 1;
    retire(old, settings.retireAfterMs);
  }

  function retire(pool: Pool, afterMs: number): void {
    const done = new Promise<void>((resolve) => {
      let cut = false;
      const cutNow = () => {
        if (cut) return;
        cut = true;
        clearTimeout(timer);
        // Nothing of Sluice's is left on it: end it without waiting on connections that closed
        // with a statement running (the driver would wait for that statement until the timeout).
        pool.sql.end({ timeout: 0 }).then(resolve, resolve);
      };
      const timer = setTimeout(cutNow, afterMs);
      timer.unref();
      if (pool.inFlight === 0) cutNow();
      else pool.whenIdle.push(cutNow);
    });
    retiring.add(done);
    void done.then(() => {
      retiring.delete(done);
    });
  }

  /** Counts `settles` as running on `pool` until it settles. */
  const track = (pool: Pool, settles: Promise<unknown>) => {
    pool.inFlight += 1;
    const settled = () => {
      pool.inFlight -= 1;
      if (pool.inFlight === 0) for (const idle of pool.whenIdle.splice(0)) idle();
    };
    settles.then(settled, settled);
  };

  /**
   * A statement made on `pool`: counted as running once it is awaited (a postgres.js query is
   * sent then; one used only as a fragment of another statement never is). Its first `then` (which
   * `catch`, `finally` and `await` go through) counts it and hands over to the query's own.
   */
  const trackStatement = (pool: Pool, statement: Promise<unknown>): Promise<unknown> => {
    const query = statement as unknown as { then: (...args: never[]) => unknown };
    const send = query.then as (...args: unknown[]) => unknown;
    query.then = (...args: unknown[]) => {
      query.then = send; // counted once
      track(pool, statement);
      return Reflect.apply(send, query, args);
    };
    return statement;
  };

  const handle = new Proxy(function sluiceSql() {} as unknown as Sql, {
    apply(_target, thisArg, args: unknown[]) {
      const pool = current;
      const made = Reflect.apply<unknown, unknown[], unknown>(
        pool.sql as unknown as (...a: unknown[]) => unknown,
        thisArg,
        args,
      );
      return made instanceof Promise ? trackStatement(pool, made) : made;
    },
    get(_target, property) {
      if (property === 'end') return () => own.end();
      const pool = current;
      if (property === 'begin') {
        return (...args: unknown[]) => {
          const begin = Reflect.get(pool.sql, 'begin') as (...a: unknown[]) => Promise<unknown>;
          const begun = Reflect.apply(begin, pool.sql, args);
          track(pool, begun);
          return begun;
        };
      }
      if (property === 'unsafe' || property === 'file') {
        return (...args: unknown[]) => {
          const made = Reflect.apply(
            Reflect.get(pool.sql, property) as (...a: unknown[]) => unknown,
            pool.sql,
            args,
          );
          return made instanceof Promise ? trackStatement(pool, made) : made;
        };
      }
      const value = Reflect.get(pool.sql as object, property) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(pool.sql) : value;
    },
  });

  const own: OwnConnections = {
    sql: handle,
    get replacements() {
      return replacements;
    },
    async end() {
      if (!ended) {
        ended = true;
        retire(current, 0);
      }
      while (retiring.size > 0) await Promise.all([...retiring]);
    },
  };
  return own;
}

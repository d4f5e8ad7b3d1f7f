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
// - runs without the driver's own `idle_timeout` and `max_lifetime`. postgres.js 3.4.9 reports a
//   connection it ended for idleness or age through the same `onclose` as one that died, with
//   nothing to tell them apart, so with those timers every idle or aged connection would replace
//   the whole pool (with `idle_timeout: 1`, about once a second under light work). Without them,
//   every close the driver reports is unexpected. The application's settings still hold, for the
//   pool as a whole: once nothing of Sluice's has run on it for `idle_timeout`, or once it is
//   `max_lifetime` old (postgres.js's default: 30 to 60 minutes), the pool is renewed the way a
//   replaced one is retired, and that is not counted as a replacement;
// - continues with `prepare: false` once PostgreSQL says a prepared statement it made is missing
//   or already there (SQLSTATE 26000, 42P05): the pool is then behind a transaction pooler (or its
//   server connections are otherwise shared), which hands each transaction another server
//   connection. There, postgres.js 3.4.9 re-prepares the statement inside the failed transaction,
//   after the statement pipelined behind it has already made the server skip to its Sync: the
//   re-prepared statement is never answered, and that transaction (and its consumer's turn, and
//   stop()) would wait for ever. The pool is replaced by one that does not prepare, so what is stuck
//   on the old one is cut after `retireAfterMs`; the application is told (its own pool needs
//   `prepare: false` as well);
// - is sized for Sluice's own work (turns, turn starts, pre-checks), so the application's
//   requests and handlers never wait on it, nor it on them;
// - names its connections (application_name), so an operator can tell them from the app's;
// - applies no `transform` of the application's pool to the rows it reads.
import postgres from 'postgres';
import { checkConnection } from '../connect-timeout.js';
import { poolerHint } from '../dispatcher/classify-failure.js';
import { ConnectTimeoutError, messageOf, sqlStateOf } from '../errors.js';
import type { Logger } from '../logger.js';
import type { Sql, TransactionSql } from '../sql-types.js';
import { pipelinedBegin, type PoolCloses } from './pipelined-begin.js';
import { settleWithin, TIMED_OUT } from '../time-limit.js';

export interface OwnConnectionsSettings {
  /** Connections at most. */
  readonly max: number;
  /** application_name of every connection (PostgreSQL keeps at most 63 bytes). */
  readonly applicationName: string;
  /** A replaced pool's transactions and statements get this long to settle before it is cut. */
  readonly retireAfterMs: number;
  /** Told, once, that the pool continues without prepared statements (see the top of this file). */
  readonly onUnprepared?: (error: unknown) => void;
  /**
   * Shared by the pools of one dispatcher: once one of them learns that prepared statements do not
   * survive (a transaction pooler), all of them continue without. A turn's pipelined statements
   * may fail in ways that do not say so (postgres.js 3.4.9 re-prepares the first one while the
   * others are already on the wire, and misreads the answers), so the turns' pools learn it from
   * the pool of the pre-checks. Absent: the pool decides alone.
   */
  readonly preparing?: PreparingSwitch;
  /**
   * `begin(fn)` pipelines BEGIN with fn's first statements (pipelined-begin.ts). Only for a pool of
   * one connection: a close the pool reports abandons every transaction running on it.
   */
  readonly pipelinedTransactions?: boolean;
}

export interface OwnConnections {
  /** Always the current pool (a stable handle: calls go to whichever pool is current). */
  readonly sql: Sql;
  /** How many times the pool was replaced after a connection closed unexpectedly. */
  readonly replacements: number;
  /** How many times the pool was renewed after `idle_timeout` unused or at `max_lifetime` (planned). */
  readonly renewals: number;
  /**
   * Resolves once a connection of the pool has completed PostgreSQL's startup and answered, within
   * `timeoutMs` (the application pool's `connect_timeout` by default). Call it before the first
   * statement: a port where something else answers (an HTTP server) makes postgres.js 3 reconnect
   * at once, again and again, and that statement would wait for ever. After a timeout the pool that
   * kept trying is cut and a fresh one takes its place, so a later call begins afresh.
   * @throws {ConnectTimeoutError}
   */
  checkConnection(timeoutMs?: number): Promise<void>;
  /**
   * The outcome of the statement `make` makes on the current pool, when it comes within `ms`.
   * Else the pool is replaced (what runs on it is cut after `retireAfterMs`) and this rejects
   * saying `what` got no answer: a connection gone silent (packets dropped without a close, a
   * frozen server or pooler) never answers, and no server-side timeout reaches it.
   */
  answered<T>(ms: number, what: string, make: (sql: Sql) => Promise<T>): Promise<T>;
  /**
   * Replaces the pool and cuts the old one's connections now: what runs on it fails as at a
   * connection's loss (a turn whose transaction has had no answer for longer than its bounds).
   */
  cut(): void;
  /** Counts the pools: it grows each time the current pool is replaced, renewed or cut. */
  readonly generation: number;
  /**
   * Replaces the pool, when it is still the one of `generation` (the current one when left out):
   * what runs on the old one gets `retireAfterMs` to settle before its connections are cut (a
   * statement that got no answer in time: its connection may be gone silent). Several requests
   * that met the same silent pool replace it once.
   */
  replace(generation?: number): void;
  /** Ends the current pool and every replaced one still settling. */
  end(): Promise<void>;
}

type Options = postgres.Options<Record<string, postgres.PostgresType>>;

/** One postgres.js pool, with what Sluice has running on it. */
interface Pool {
  readonly sql: Sql;
  /** No more statements and transactions at once than connections (no prepared statements: a pooler). */
  readonly oneAtATime: boolean;
  inFlight: number;
  /** Statements waiting for one of the pool's connections to be free (trackStatement). */
  readonly queued: (() => void)[];
  readonly whenIdle: (() => void)[];
  /** Renews the pool once it has had nothing running for the application's idle_timeout. */
  idleTimer: NodeJS.Timeout | undefined;
  /** Renews the pool at the application's max_lifetime. */
  lifeTimer: NodeJS.Timeout | undefined;
  /** Its transactions, told when one of its connections closes (pipelined-begin.ts). */
  readonly closes: PoolCloses & { notify(): void };
}

function closeListeners(): PoolCloses & { notify(): void } {
  const listeners = new Set<() => void>();
  return {
    listen(onClose) {
      listeners.add(onClose);
      return () => listeners.delete(onClose);
    },
    notify() {
      for (const onClose of [...listeners]) onClose();
    },
  };
}

/**
 * Parsers (no serializers) for the built-in types of Sluice's rows, as postgres.js's defaults:
 * bool; int2, int4, oid, float4, float8; json, jsonb; timestamptz.
 */
const SLUICE_TYPES = {
  sluiceBool: { from: [16], parse: (text: string) => text === 't' },
  sluiceNumber: { from: [21, 23, 26, 700, 701], parse: (text: string) => Number(text) },
  sluiceJson: { from: [114, 3802], parse: (text: string): unknown => JSON.parse(text) },
  sluiceTimestamptz: { from: [1184], parse: (text: string) => new Date(text) },
};

/**
 * The application's `types` and `parsers` with the default parser put back for each type of
 * Sluice's rows that one of its `types` parses: only those, so that the driver's own fast paths stay
 * for the others. postgres.js 4 builds its parsers from `types` (a later entry wins); 3 takes the
 * options of a pool made from another's as they are (they carry `shared`), `parsers` included.
 */
function sluiceParsing(base: Record<string, unknown>): Record<string, unknown> {
  const given = base['types'] as Record<string, unknown> | undefined;
  if (given === undefined) return {};
  // A type given by name (postgres.js 4: pgvector's 'vector', say) is looked up with fetch_types,
  // which Sluice's pools do without (see the top of this file): postgres.js would refuse the pool.
  // Such columns read as text through `ctx.tx`.
  const types = Object.fromEntries(
    Object.entries(given).filter(([, type]) => {
      const { to, from } = type as { to?: unknown; from?: unknown };
      return ![to, from ?? []].flat().some((oid) => typeof oid === 'string');
    }),
  );
  const parsed = new Set(
    Object.values(types).flatMap((type) => [(type as { from?: unknown }).from ?? []].flat()),
  );
  const putBack = Object.entries(SLUICE_TYPES).flatMap(([name, { from, parse }]) => {
    const oids = from.filter((oid) => parsed.has(oid));
    return oids.length > 0 ? [[name, { from: oids, parse }] as const] : [];
  });
  if (putBack.length === 0) return { types };
  const parsers: Record<number, unknown> = { ...(base['parsers'] as Record<number, unknown> | undefined) };
  for (const [, { from, parse }] of putBack) for (const oid of from) parsers[oid] = parse;
  return { types: { ...types, ...Object.fromEntries(putBack) }, parsers };
}

/** The template's `idle_timeout` or `max_lifetime` in milliseconds (seconds, or a function drawing them). */
function secondsOption(value: unknown): number | undefined {
  const seconds = typeof value === 'function' ? (value as () => unknown)() : value;
  return typeof seconds === 'number' && seconds > 0 ? seconds * 1000 : undefined;
}

/**
 * Opens Sluice's own pool from `template`'s connection options (host, port, database, user,
 * password, ssl, prepare, transforms…), overriding what Sluice needs (see the top of this file).
 */
export function openOwnConnections(template: Sql, settings: OwnConnectionsSettings): OwnConnections {
  const base = template.options as unknown as Record<string, unknown>;
  const retiring = new Set<Promise<void>>();
  /** Cuts each retiring pool now (end() does: what still runs on one waits for an answer that may never come). */
  const cutters = new Set<() => void>();
  let replacements = 0;
  let renewals = 0;
  let ended = false;
  const idleMs = secondsOption(base['idle_timeout']);
  const preparing = settings.preparing ?? preparingSwitch(base['prepare'] !== false);
  let prepare = preparing.enabled;
  const stopListening = preparing.onOff(() => {
    if (!prepare || ended) return;
    prepare = false;
    replace();
  });

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
      // The types Sluice's own rows are made of read as postgres.js reads them by default,
      // whatever the application's pool's `types` say (times as text, JSON left unparsed, numbers
      // as BigInt…): Sluice's statements depend on them. Its other types (int8, numeric, date,
      // its own) stay the application's, and so do all of its serializers (`ctx.tx`).
      ...sluiceParsing(base),
      max: settings.max,
      fetch_types: false,
      prepare,
      // Without prepared statements (what a transaction pooler needs, and what Sluice turns to when
      // it meets one): one statement at a time on each connection outside a transaction
      // (postgres.js 4; 3 has no such option and ignores it, and trackStatement queues instead).
      // Pipelined through a transaction pooler (PgBouncer 1.18 in suite T8), an answer could go
      // missing, and the statement wait for ever. With prepared statements pipelining stays: 32
      // lanes catching up lost about a fifth of their rate one at a time (pnpm bench, catch-up).
      ...(prepare ? {} : { max_pipeline: 1 }),
      // Honoured for the whole pool below: the driver's own timers would look like deaths.
      idle_timeout: null,
      max_lifetime: null,
      // postgres.js 4's client-side bound on a statement: Sluice's statements are bounded on the
      // server (statementTimeoutMs), and some wait on purpose (a start behind a prune's advisory
      // lock, an operator action behind a turn's row lock), which it would cut with QUERY_TIMEOUT.
      query_timeout: 0,
      connection: {
        ...(base['connection'] as Record<string, unknown> | undefined),
        application_name: settings.applicationName.slice(0, 63),
      },
      onclose: () => {
        pool.closes.notify();
        if (pool === current && !ended) replace();
      },
    };
    const pool: Pool = {
      sql: postgres(options as unknown as Options),
      oneAtATime: !prepare,
      inFlight: 0,
      queued: [],
      whenIdle: [],
      idleTimer: undefined,
      lifeTimer: undefined,
      closes: closeListeners(),
    };
    // Drawn per pool, as postgres.js draws its default per connection.
    const lifetimeMs = secondsOption(base['max_lifetime']);
    if (lifetimeMs !== undefined) {
      pool.lifeTimer = setTimeout(() => {
        renew(pool);
      }, lifetimeMs);
      pool.lifeTimer.unref();
    }
    return pool;
  };

  let current = create();
  let generation = 0;

  /** A fresh pool becomes current; the old one is retired, cut after `afterMs` at the latest. */
  function swap(afterMs: number): void {
    const old = current;
    current = create();
    generation += 1;
    retire(old, afterMs);
  }

  function replace(): void {
    replacements += 1;
    swap(settings.retireAfterMs);
  }

  /** A statement or transaction on `pool` failed: a prepared statement missing means a pooler. */
  function failed(pool: Pool, error: unknown): void {
    if (!prepare || pool !== current || ended) return;
    const state = sqlStateOf(error);
    if (state !== '26000' && state !== '42P05') return;
    if (preparing.off()) settings.onUnprepared?.(error);
  }

  /** A planned renewal of `pool`, when it is still the current one. */
  function renew(pool: Pool): void {
    if (pool !== current || ended) return;
    renewals += 1;
    swap(settings.retireAfterMs);
  }

  function retire(pool: Pool, afterMs: number): void {
    clearTimeout(pool.idleTimer);
    clearTimeout(pool.lifeTimer);
    let cutter: () => void = () => undefined;
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
      cutter = cutNow;
      if (pool.inFlight === 0) cutNow();
      else pool.whenIdle.push(cutNow);
    });
    retiring.add(done);
    cutters.add(cutter);
    void done.then(() => {
      retiring.delete(done);
      cutters.delete(cutter);
    });
  }

  /** Counts `settles` as running on `pool` until it settles. */
  const track = (pool: Pool, settles: Promise<unknown>) => {
    pool.inFlight += 1;
    clearTimeout(pool.idleTimer);
    pool.idleTimer = undefined;
    const settled = () => {
      pool.inFlight -= 1;
      pool.queued.shift()?.();
      if (pool.inFlight > 0) return;
      for (const idle of pool.whenIdle.splice(0)) idle();
      if (idleMs !== undefined && pool === current && !ended) {
        pool.idleTimer = setTimeout(() => {
          if (pool.inFlight === 0) renew(pool);
        }, idleMs);
        pool.idleTimer.unref();
      }
    };
    settles.then(settled, (error: unknown) => {
      settled();
      failed(pool, error);
    });
  };

  /**
   * A statement made on `pool`: counted as running once it is awaited (a postgres.js query is
   * sent then; one used only as a fragment of another statement never is). Its first `then` (which
   * `catch`, `finally` and `await` go through) counts it and hands over to the query's own. On a
   * pool without prepared statements (a transaction pooler's), while as many statements and
   * transactions run as the pool has connections, it waits here for one to end, rather than be
   * pipelined by the driver behind another on a busy connection: through a transaction pooler such
   * a statement's answer can go missing (docs/operating.md, "Behind a pooler"; postgres.js 4's
   * max_pipeline: 1 says the same to the driver, 3 has no such option).
   */
  const trackStatement = (pool: Pool, statement: Promise<unknown>): Promise<unknown> => {
    const query = statement as unknown as { then: (...args: never[]) => unknown };
    const send = query.then as (...args: unknown[]) => unknown;
    query.then = (...args: unknown[]) => {
      query.then = send; // counted once
      if (!pool.oneAtATime || pool.inFlight < settings.max) {
        track(pool, statement);
        return Reflect.apply(send, query, args);
      }
      return new Promise<unknown>((resolve) => {
        pool.queued.push(() => {
          track(pool, statement);
          resolve(statement);
        });
      }).then(...(args as [never, never]));
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
          // With pipelinedTransactions, begin([options, ]fn) sends BEGIN with fn's first statements.
          const fn = args.at(-1);
          const options = args.length === 2 ? args[0] : '';
          const begun =
            settings.pipelinedTransactions === true &&
            args.length <= 2 &&
            typeof fn === 'function' &&
            typeof options === 'string'
              ? pipelinedBegin(pool.sql, pool.closes, fn as (tx: TransactionSql) => unknown, options)
              : Reflect.apply(
                  Reflect.get(pool.sql, 'begin') as (...a: unknown[]) => Promise<unknown>,
                  pool.sql,
                  args,
                );
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
    get renewals() {
      return renewals;
    },
    async checkConnection(timeoutMs?: number) {
      const pool = current;
      try {
        await checkConnection(pool.sql, timeoutMs);
      } catch (error) {
        if (error instanceof ConnectTimeoutError && pool === current && !ended) swap(0);
        throw error;
      }
    },
    async answered<T>(ms: number, what: string, make: (sql: Sql) => Promise<T>): Promise<T> {
      const pool = current;
      const outcome = await settleWithin(make(handle), ms);
      if (outcome !== TIMED_OUT) return outcome;
      if (pool === current && !ended) replace();
      throw new Error(
        `${what} got no answer within ${ms} ms: a connection gone silent (a network that drops packets ` +
          "without closing, a frozen server or pooler)? Sluice's connections are replaced",
      );
    },
    get generation() {
      return generation;
    },
    replace(of?: number) {
      if (!ended && (of === undefined || of === generation)) replace();
    },
    cut() {
      if (ended) return;
      replacements += 1;
      swap(0);
    },
    async end() {
      if (!ended) {
        ended = true;
        stopListening();
        retire(current, 0);
      }
      // A pool replaced earlier may still wait for its retireAfterMs (a statement on a connection
      // gone silent): ended now, it does not hold the end up.
      for (const cutNow of [...cutters]) cutNow();
      while (retiring.size > 0) await Promise.all([...retiring]);
    },
  };
  return own;
}

/** Whether the pools sharing it prepare statements: on, until one of them turns it off. */
export interface PreparingSwitch {
  readonly enabled: boolean;
  /** Turns it off; true the first time (the caller says so once). */
  off(): boolean;
  /** Calls `listener` when it is turned off; returns its unsubscription. */
  onOff(listener: () => void): () => void;
}

export function preparingSwitch(enabled: boolean): PreparingSwitch {
  const listeners = new Set<() => void>();
  const state = {
    enabled,
    off() {
      if (!state.enabled) return false;
      state.enabled = false;
      for (const listener of [...listeners]) listener();
      return true;
    },
    onOff(listener: () => void) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
  };
  return state;
}

/** What a pool that continues without prepared statements logs (once per pool of Sluice's). */
export function logUnprepared(logger: Logger, error: unknown): void {
  logger.warn(
    { error: messageOf(error), hint: poolerHint(error) },
    "a prepared statement did not survive to the next transaction (behind a transaction pooler?): Sluice's " +
      'own connections continue with prepare: false',
  );
}

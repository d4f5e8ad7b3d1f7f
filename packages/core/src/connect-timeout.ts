import { ConnectTimeoutError, InvalidOptionError } from './errors.js';
import { MAX_MS, requirePool } from './options.js';
import type { Sql } from './sql-types.js';
import { settleWithin, TIMED_OUT } from './time-limit.js';

/** postgres.js's own default for `connect_timeout` (seconds). */
const POSTGRES_JS_CONNECT_TIMEOUT_S = 30;

/** The pool's `connect_timeout` in milliseconds (postgres.js takes seconds; 30 when unset). */
export function connectTimeoutMsOf(sql: Sql): number {
  const seconds = (sql.options as { connect_timeout?: unknown }).connect_timeout;
  return typeof seconds === 'number' && seconds > 0 ? seconds * 1000 : POSTGRES_JS_CONNECT_TIMEOUT_S * 1000;
}

/** Where the pool connects, for messages: `host:port` pairs or the Unix socket path, never credentials. */
export function addressOf(sql: Sql): string {
  const options = sql.options as { host?: readonly string[]; port?: readonly number[]; path?: unknown };
  if (typeof options.path === 'string' && options.path !== '') return options.path;
  const hosts = options.host ?? [];
  const ports = options.port ?? [];
  return hosts.map((host, i) => `${host}:${ports[i] ?? ports[0] ?? 5432}`).join(',') || 'the database';
}

/** The driver's error when what answered does not speak PostgreSQL's protocol (postgres.js 4). */
export function isNotPostgres(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === 'PROTOCOL_ERROR';
}

/**
 * `query`, the first statement on a connection `sql` is opening, given at most `timeoutMs` to answer,
 * else a {@link ConnectTimeoutError}. postgres.js's `connect_timeout` bounds one connection attempt,
 * and every new attempt restarts it: a peer that is not PostgreSQL (an HTTP server on that port)
 * answers the startup message with something else and closes the connection, postgres.js connects
 * again at once, and the query waits for ever (postgres.js 3). The query is left
 * running: after a timeout the caller ends the pool (`sql.end({ timeout: 0 })`), which stops those
 * attempts. postgres.js 4 rejects the query at once instead (PROTOCOL_ERROR: the answer was not
 * PostgreSQL's protocol): the same ConnectTimeoutError, without the wait.
 */
export async function withinConnectTimeout<T>(
  sql: Sql,
  query: Promise<T>,
  timeoutMs: number = connectTimeoutMsOf(sql),
): Promise<T> {
  const outcome = await settleWithin(query, timeoutMs).catch((error: unknown) => {
    if (isNotPostgres(error)) {
      throw new ConnectTimeoutError(addressOf(sql), timeoutMs, error);
    }
    throw error;
  });
  if (outcome === TIMED_OUT) throw new ConnectTimeoutError(addressOf(sql), timeoutMs);
  return outcome;
}

/**
 * Waits until `sql` has completed PostgreSQL's startup on a connection and answered `select 1`, at
 * most `timeoutMs` (the pool's `connect_timeout` by default). Call it once at boot to fail fast on a
 * `DATABASE_URL` that points at something other than PostgreSQL.
 * A server that refuses the connection at once (nothing listens on the port: ECONNREFUSED) or
 * refuses its credentials fails it with the driver's own error, which says so.
 * @throws {ConnectTimeoutError} when no answer came in time; end the pool then
 * @throws {InvalidOptionError} when `timeoutMs` is not a whole number of milliseconds, 1 to 2³¹ − 1
 */
export async function checkConnection(sql: Sql, timeoutMs?: number): Promise<void> {
  requirePool(sql);
  if (
    timeoutMs !== undefined &&
    (typeof timeoutMs !== 'number' || !Number.isSafeInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > MAX_MS)
  ) {
    throw new InvalidOptionError('timeoutMs', `must be an integer from 1 to ${MAX_MS} (ms)`);
  }
  await withinConnectTimeout(
    sql,
    sql`select 1`.then(() => undefined),
    timeoutMs ?? connectTimeoutMsOf(sql),
  );
}

import { sqlStateOf, TransactionAbandonedError } from '../errors.js';
import { PoolExhaustedError } from '../queries/turn-starts.js';

/** Failure categories recorded on the consumer row (failure_category) and in metrics. */
export type FailureCategory =
  'connection' | 'timeout' | 'serialization' | 'lock' | 'resources' | 'server' | 'unknown';

// postgres.js' own codes for a socket that went away.
const CONNECTION_CODES = new Set([
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'CONNECT_TIMEOUT',
  'ECONNRESET',
  'ECONNREFUSED',
  'EPIPE',
  'ETIMEDOUT',
]);

/** Classifies an infrastructure failure of a turn by SQLSTATE or driver code. */
export function classifyFailure(error: unknown): FailureCategory {
  // Total: a handler's error may throw from its getters or traps; then it is no connection loss.
  try {
    if (error instanceof PoolExhaustedError) return 'resources';
    // Its transaction's connection was lost (guarded-transaction.ts ended it).
    if (error instanceof TransactionAbandonedError) return 'connection';
    const code = typeof error === 'object' && error !== null && 'code' in error ? String(error.code) : '';
    if (CONNECTION_CODES.has(code)) return 'connection';
    const sqlState = sqlStateOf(error);
    if (sqlState === undefined) return 'unknown';
    if (sqlState.startsWith('08') || sqlState === '57P01' || sqlState === '57P02' || sqlState === '57P03')
      return 'connection';
    if (sqlState === '57014' || sqlState === '25P03') return 'timeout';
    if (sqlState === '40001' || sqlState === '40P01') return 'serialization';
    if (sqlState === '55P03') return 'lock';
    if (sqlState.startsWith('53')) return 'resources';
    return 'server';
  } catch {
    return 'unknown';
  }
}

/** Whether the turn's connection is gone (the turn cannot continue on it). */
export function isConnectionLoss(error: unknown): boolean {
  return classifyFailure(error) === 'connection';
}

/**
 * What to do about a failure that says the connection is shared by a transaction pooler: a
 * prepared statement made in one transaction is missing (or already there) in the next, because
 * PgBouncer's pool_mode=transaction hands each transaction another server connection.
 */
export function poolerHint(error: unknown): string | undefined {
  const sqlState = sqlStateOf(error);
  if (sqlState !== '26000' && sqlState !== '42P05') return undefined;
  return (
    'prepared statements do not survive from one transaction to the next here: behind a transaction ' +
    "pooler such as PgBouncer, create the pool with prepare: false (docs/operating.md, 'Behind a pooler')"
  );
}

// Beyond a lost connection: the address does not resolve or route, the Unix socket is not there,
// the login's protocol failed, or the TLS handshake did (the server, or a pooler in front of it,
// speaks no TLS, or its certificate is refused).
const UNREACHABLE_CODES = new Set([
  ...CONNECTION_CODES,
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOENT', // a Unix socket path that does not exist
  'EPROTO',
  'SSL_NOT_SUPPORTED', // postgres.js: TLS required, and the server (or pooler) answered that it has none
  'SASL_SIGNATURE_MISMATCH',
  'AUTH_TYPE_NOT_IMPLEMENTED',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_HAS_EXPIRED',
]);

/**
 * How `error` says the database cannot be used, if it does: 'state' for a SQLSTATE (connection
 * exceptions, failed authentication, no such database, the server shutting down or starting up, too
 * many connections), 'socket' for a socket, DNS, TLS or driver code (it cannot be reached, or the
 * connection was lost before the answer came). Shared by the CLI's exit codes and the ops routes'
 * 503.
 */
export function unreachableBy(error: unknown): 'state' | 'socket' | undefined {
  try {
    if (error instanceof TransactionAbandonedError) return 'socket';
    // The driver's and the socket's codes first: EPIPE has the shape of a SQLSTATE.
    const code = typeof error === 'object' && error !== null && 'code' in error ? error.code : undefined;
    if (
      typeof code === 'string' &&
      (UNREACHABLE_CODES.has(code) || code.startsWith('ERR_SSL_') || code.startsWith('ERR_TLS_'))
    ) {
      return 'socket';
    }
    const state = sqlStateOf(error);
    if (state === undefined) return undefined;
    const unusable =
      state.startsWith('08') ||
      state.startsWith('28') ||
      ['3D000', '57P01', '57P02', '57P03', '53300'].includes(state);
    return unusable ? 'state' : undefined;
  } catch {
    return undefined;
  }
}

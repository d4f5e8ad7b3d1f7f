import { SchemaNotMigratedError, SluiceError, type CliErrorCode, type SluiceErrorCode } from '@sluice/core';
import { messageOf, sqlStateOf } from '@sluice/core/internal';
import { CLI_ERROR_CODES, EXIT_CODES, type ExitCode } from './exit-codes.js';
import { UsageError } from './usage-error.js';

/** What the operator is told, and what scripts see: the exit code, and with --json the code. */
export interface Failure {
  readonly exitCode: ExitCode;
  /** A Sluice error's own code, else one of the CLI's (CLI_ERROR_CODES). */
  readonly code: SluiceErrorCode | CliErrorCode;
  readonly message: string;
  /** The PostgreSQL SQLSTATE of a database error, when there is one. */
  readonly sqlState?: string;
}

function cliFailure(code: CliErrorCode, message: string, sqlState?: string): Failure {
  return {
    exitCode: CLI_ERROR_CODES[code],
    code,
    message,
    ...(sqlState === undefined ? {} : { sqlState }),
  };
}

const BY_CODE: Partial<Record<SluiceErrorCode, ExitCode>> = {
  SLUICE_INVALID_OPTION: EXIT_CODES.usage,
  SLUICE_CONSUMER_NOT_FOUND: EXIT_CODES.notFound,
  SLUICE_EVENT_NOT_FOUND: EXIT_CODES.notFound,
  SLUICE_DEAD_LETTER_NOT_FOUND: EXIT_CODES.notFound,
  SLUICE_KEY_NOT_PARKED: EXIT_CODES.notFound,
  SLUICE_REBUILD_NOT_FOUND: EXIT_CODES.notFound,
  SLUICE_SKIP_MISMATCH: EXIT_CODES.refused,
  SLUICE_CONSUMER_BUSY: EXIT_CODES.refused,
  SLUICE_BELOW_RETENTION_FLOOR: EXIT_CODES.refused,
  SLUICE_BEYOND_HEAD: EXIT_CODES.refused,
  SLUICE_NOT_A_GAP: EXIT_CODES.refused,
  SLUICE_GAP_HELD: EXIT_CODES.refused,
  SLUICE_LANE_CHANGE_IN_PROGRESS: EXIT_CODES.refused,
  SLUICE_REBUILD_STATE: EXIT_CODES.refused,
  SLUICE_REBUILD_NOT_READY: EXIT_CODES.refused,
  SLUICE_SCHEMA_NOT_MIGRATED: EXIT_CODES.unreachable,
  SLUICE_CONNECT_TIMEOUT: EXIT_CODES.unreachable,
  SLUICE_TRANSACTION_ABANDONED: EXIT_CODES.unreachable,
};

// Errors of the socket (Node) and of postgres.js's connection handling: the database cannot be
// reached, or the connection was lost before the answer came.
const CONNECTION_ERROR_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EPIPE',
  'ENOENT', // a Unix socket path that does not exist
  'CONNECT_TIMEOUT',
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'SASL_SIGNATURE_MISMATCH',
  'AUTH_TYPE_NOT_IMPLEMENTED',
]);

/**
 * SQLSTATEs that mean "this database cannot be used": connection exceptions (class 08), failed
 * authentication (28), no such database, the server shutting down or starting up, too many
 * connections.
 */
function isUnreachableState(state: string): boolean {
  return (
    state.startsWith('08') ||
    state.startsWith('28') ||
    ['3D000', '57P01', '57P02', '57P03', '53300'].includes(state)
  );
}

function codeOf(error: unknown): string | undefined {
  if (typeof error === 'object' && error !== null && 'code' in error && typeof error.code === 'string') {
    return error.code;
  }
  return undefined;
}

/** Maps anything a command threw to its message and exit code (see exit-codes.ts). */
export function describeFailure(error: unknown, schema: string): Failure {
  if (error instanceof UsageError) return cliFailure('SLUICE_USAGE', error.message);
  if (error instanceof SluiceError) {
    const message =
      error.code === 'SLUICE_CONNECT_TIMEOUT' ? `cannot reach the database: ${error.message}` : error.message;
    return { exitCode: BY_CODE[error.code] ?? EXIT_CODES.failure, code: error.code, message };
  }
  const state = sqlStateOf(error);
  // The admin API queries the tables directly: a missing schema or table means "not migrated".
  if (state === '42P01' || state === '3F000') {
    return {
      exitCode: EXIT_CODES.unreachable,
      code: 'SLUICE_SCHEMA_NOT_MIGRATED',
      message: `${new SchemaNotMigratedError(schema).message} (wrong --schema or --database-url?)`,
      sqlState: state,
    };
  }
  if (state !== undefined && isUnreachableState(state)) {
    return cliFailure('SLUICE_DATABASE_UNREACHABLE', `cannot use the database: ${messageOf(error)}`, state);
  }
  const code = codeOf(error);
  if (code !== undefined && CONNECTION_ERROR_CODES.has(code)) {
    return cliFailure('SLUICE_DATABASE_UNREACHABLE', `cannot reach the database: ${messageOf(error)}`);
  }
  if (code === 'ERR_INVALID_URL') return cliFailure('SLUICE_USAGE', 'the database URL is not a valid URL');
  const detail = state === undefined ? '' : ` (SQLSTATE ${state})`;
  return cliFailure('SLUICE_UNEXPECTED', `${messageOf(error)}${detail}`, state);
}

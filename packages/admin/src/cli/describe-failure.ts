import { SchemaNotMigratedError, SluiceError, type CliErrorCode, type SluiceErrorCode } from '@sluice/core';
import { messageOf, sqlStateOf, unreachableBy } from '@sluice/core/internal';
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
  const unreachable = unreachableBy(error);
  // An OpenSSL message ends with a line break.
  const text = messageOf(error).trim();
  if (unreachable === 'state') {
    return cliFailure('SLUICE_DATABASE_UNREACHABLE', `cannot use the database: ${text}`, state);
  }
  if (unreachable === 'socket') {
    return cliFailure('SLUICE_DATABASE_UNREACHABLE', `cannot reach the database: ${text}`);
  }
  const code = codeOf(error);
  if (code === 'ERR_INVALID_URL') return cliFailure('SLUICE_USAGE', 'the database URL is not a valid URL');
  const detail = state === undefined ? '' : ` (SQLSTATE ${state})`;
  return cliFailure('SLUICE_UNEXPECTED', `${text}${detail}`, state);
}

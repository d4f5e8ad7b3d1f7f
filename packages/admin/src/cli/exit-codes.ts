import type { CliErrorCode } from '@sluice/core';

/**
 * Exit codes of the `sluice` CLI. Scripts branch on them, so they never change meaning:
 *   0 success
 *   1 anything else (an unexpected failure)
 *   2 usage error: unknown command or option, missing argument, malformed value (SLUICE_INVALID_OPTION)
 *   3 not found: no such consumer or instance (SLUICE_CONSUMER_NOT_FOUND), event (SLUICE_EVENT_NOT_FOUND),
 *     dead letter (SLUICE_DEAD_LETTER_NOT_FOUND), parked key (SLUICE_KEY_NOT_PARKED) or rebuild
 *     (SLUICE_REBUILD_NOT_FOUND)
 *   4 refused because of the consumer's state; nothing was changed (SLUICE_SKIP_MISMATCH,
 *     SLUICE_CONSUMER_BUSY, SLUICE_BELOW_RETENTION_FLOOR, SLUICE_BEYOND_HEAD, SLUICE_NOT_A_GAP,
 *     SLUICE_GAP_HELD, SLUICE_LANE_CHANGE_IN_PROGRESS, SLUICE_REBUILD_STATE, SLUICE_REBUILD_NOT_READY)
 *   5 cannot reach the database, or what answers there is not PostgreSQL (SLUICE_CONNECT_TIMEOUT), or the
 *     Sluice schema is not migrated there (SLUICE_SCHEMA_NOT_MIGRATED), or the connection was lost
 *     during the action's transaction, which did not commit (SLUICE_TRANSACTION_ABANDONED)
 */
export const EXIT_CODES = {
  success: 0,
  failure: 1,
  usage: 2,
  notFound: 3,
  refused: 4,
  unreachable: 5,
} as const;

export type ExitCode = (typeof EXIT_CODES)[keyof typeof EXIT_CODES];

/** The table `sluice --help` prints. */
export const EXIT_CODES_HELP = [
  ['0', 'success'],
  ['1', 'unexpected failure'],
  ['2', 'usage error: unknown command or option, missing argument, malformed value'],
  ['3', 'no such consumer (or instance, event, dead letter, parked key, rebuild)'],
  [
    '4',
    "refused because of the consumer's state (wrong event to skip, busy, beyond head, a lane change draining, a rebuild not ready, …); nothing changed",
  ],
  [
    '5',
    'cannot reach the database, or it is not PostgreSQL (within the connect timeout, 10 s), or the Sluice schema is not migrated there',
  ],
] as const;

/**
 * The codes `--json` reports for failures that are not a Sluice error of their own (those keep
 * theirs: SLUICE_CONSUMER_NOT_FOUND, SLUICE_NOT_A_GAP, …; all are listed in @sluice/core's
 * ERROR_CODES), with their exit code, which docs/errors.md gives (cli-errors.test.ts).
 */
export const CLI_ERROR_CODES = {
  SLUICE_USAGE: EXIT_CODES.usage,
  SLUICE_DATABASE_UNREACHABLE: EXIT_CODES.unreachable,
  SLUICE_UNEXPECTED: EXIT_CODES.failure,
} as const satisfies Record<CliErrorCode, ExitCode>;

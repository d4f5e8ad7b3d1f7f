#!/usr/bin/env node
// The `sluice` CLI: operator actions on Sluice consumers, a thin layer over createAdmin().
//
// Exit codes (stable: scripts branch on them; the table lives in exit-codes.ts and `sluice --help`):
//   0  success
//   1  anything else (an unexpected failure)
//   2  usage error: unknown command or option, missing argument, malformed value, SLUICE_INVALID_OPTION
//   3  not found: SLUICE_CONSUMER_NOT_FOUND (also SLUICE_EVENT_NOT_FOUND, SLUICE_DEAD_LETTER_NOT_FOUND,
//      SLUICE_KEY_NOT_PARKED, SLUICE_REBUILD_NOT_FOUND)
//   4  refused because of the consumer's state, nothing changed: SLUICE_SKIP_MISMATCH, SLUICE_CONSUMER_BUSY,
//      SLUICE_BELOW_RETENTION_FLOOR, SLUICE_BEYOND_HEAD, SLUICE_NOT_A_GAP, SLUICE_GAP_HELD,
//      SLUICE_LANE_CHANGE_IN_PROGRESS, SLUICE_REBUILD_STATE, SLUICE_REBUILD_NOT_READY
//   5  cannot reach the database (or what answers is not PostgreSQL: SLUICE_CONNECT_TIMEOUT), or the
//      schema is not migrated there: SLUICE_SCHEMA_NOT_MIGRATED
// Results go to stdout; errors go to stderr as `sluice: <message>`, or with --json as one line of
// JSON: {"code", "message", "exitCode"} (and "sqlState" for a database error). The whole command
// line is checked before a database is looked for, so a usage error never hides behind "no
// database given" or a connection failure.
import { readFileSync } from 'node:fs';
import postgres from 'postgres';
import { checkConnection, ConnectTimeoutError, type Sql } from '@sluice/core';
import { isNotPostgres, resolveSchemaName } from '@sluice/core/internal';
import { createAdmin } from '../create-admin.js';
import { checkActorName } from '../validate.js';
import { COMMAND_LIST } from './command-list.js';
import { COMMON_OPTIONS, defaultActor, resolveDatabaseUrl } from './common-options.js';
import { describeFailure, type Failure } from './describe-failure.js';
import { EXIT_CODES, type ExitCode } from './exit-codes.js';
import { terminalSafe } from './format-text.js';
import { commandHelp, globalHelp } from './help-text.js';
import { parseCommandLine } from './parse-command-line.js';
import { UsageError } from './usage-error.js';

/** The connect timeout (seconds) unless the URL's `connect_timeout` or PGCONNECT_TIMEOUT gives one. */
const CONNECT_TIMEOUT_S = 10;

/** Two connections are plenty for one command. */
function openPool(url: string, env: NodeJS.ProcessEnv): Sql {
  const timeoutGiven = /[?&]connect_timeout=/.test(url) || (env['PGCONNECT_TIMEOUT'] ?? '') !== '';
  const options = {
    max: 2,
    // One statement at a time on each connection (postgres.js 4; 3 ignores it): pipelined through
    // a transaction pooler, an answer can go missing and the command wait for ever.
    max_pipeline: 1,
    // A command runs a few statements once: preparing them saves nothing, and through a transaction
    // pooler a statement prepared in one transaction is missing in the next.
    prepare: false,
    onnotice: () => undefined,
    // postgres.js 3.4.9 does not await this fetch: a connection cut during it (the command ending
    // the pool, a terminated backend) would stop the process. Sluice never needs array types.
    fetch_types: false,
    // Times as postgres.js reads them (ISO 8601), whatever DateStyle the database or role sets.
    connection: { DateStyle: 'ISO' },
    ...(timeoutGiven ? {} : { connect_timeout: CONNECT_TIMEOUT_S }),
  };
  try {
    return postgres(url, options as postgres.Options<Record<string, postgres.PostgresType>>);
  } catch (error) {
    // postgres.js 3 decodes the URL's user, password and database strictly (4 keeps a bad escape
    // as it is). The URL is not repeated: it may hold a password.
    if (error instanceof URIError) {
      throw new UsageError(
        'the database URL has a % that does not start an escape of UTF-8 (write a literal % as %25)',
      );
    }
    throw error;
  }
}

/**
 * Fails with SLUICE_CONNECT_TIMEOUT when the pool has not completed PostgreSQL's startup within the
 * connect timeout: a dead host, or a port where something else answers (postgres.js would reconnect
 * to it for ever, and the command would wait for ever). It runs alongside the command, so usage
 * errors still come first and touch no database; any other failure of its `select 1` is left to the
 * command's own statements to report.
 */
function handshake(sql: Sql): Promise<void> {
  return checkConnection(sql).catch((error: unknown) => {
    if (error instanceof ConnectTimeoutError) throw error;
    return new Promise<never>(() => undefined);
  });
}

/**
 * A pool ended before it ever connected may leave postgres.js one connection attempt that runs
 * until its own connect timeout; there is nothing to wait for then.
 */
const leftovers = { abandonedAttempt: false };

/** The flags given before a `--` (after it every word is an argument). */
function flagsOf(argv: readonly string[]): Set<string> {
  const end = argv.indexOf('--');
  return new Set((end === -1 ? argv : argv.slice(0, end)).filter((word) => word.startsWith('--')));
}

/** Whether `argv` holds nothing but options every command takes (and their values). */
function onlyCommonOptions(argv: readonly string[]): boolean {
  for (let i = 0; i < argv.length; i++) {
    const word = argv[i] ?? '';
    const [name = '', inline] = word.startsWith('--') ? word.slice(2).split(/=(.*)/s) : [''];
    const spec = (COMMON_OPTIONS as Record<string, { type: string } | undefined>)[name];
    if (name === 'json') continue;
    if (spec === undefined || name === 'help') return false;
    if (spec.type === 'string' && inline === undefined) i += 1; // its value is the next word
  }
  return true;
}

/** The version of @sluice/admin, which ships the CLI: its package.json is two folders up. */
function version(): string {
  const manifest = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
    version?: unknown;
  };
  return typeof manifest.version === 'string' ? manifest.version : 'unknown';
}

/** A failure as `--json` reports it on stderr: one line a script can parse. */
function failureJson(failure: Failure): string {
  return JSON.stringify({
    code: failure.code,
    message: failure.message,
    exitCode: failure.exitCode,
    ...(failure.sqlState === undefined ? {} : { sqlState: failure.sqlState }),
  });
}

async function main(argv: readonly string[], env: NodeJS.ProcessEnv): Promise<ExitCode> {
  const flags = flagsOf(argv);
  const json = flags.has('--json');
  if (argv.length === 0) {
    process.stderr.write(`${globalHelp(COMMAND_LIST)}\n`);
    return EXIT_CODES.usage;
  }
  let schema = 'sluice';
  let sql: Sql | undefined;
  // Set by the handshake's callback (a plain `let` would stay narrowed to false here).
  const pool = { connected: false };
  try {
    if (flags.has('--version')) {
      // Without a command only (the common options may come with it, as a wrapper adds them):
      // beside one it would do nothing while exiting 0, and an operator may well write
      // `sluice rebuild approve stats --version 2`.
      if (!onlyCommonOptions(argv)) {
        throw new UsageError(
          "--version goes alone (sluice --version); a rebuild's version is named as <name>@v<N> (see sluice rebuild --help)",
        );
      }
      process.stdout.write(json ? `${JSON.stringify({ version: version() })}\n` : `${version()}\n`);
      return EXIT_CODES.success;
    }
    const parsed = parseCommandLine(argv, COMMAND_LIST);
    if (parsed.kind === 'help') {
      const help = parsed.command ? commandHelp(parsed.command) : globalHelp(COMMAND_LIST);
      process.stdout.write(`${help}\n`);
      return EXIT_CODES.success;
    }
    const { command, args, values } = parsed;
    const text = (name: string) => {
      const value = values[name];
      return typeof value === 'string' ? value : undefined;
    };
    // Everything on the command line is checked first; only then is a database looked for.
    schema = resolveSchemaName(text('schema'));
    const actor = checkActorName(text('actor'), '--actor') ?? defaultActor(env);
    const work = command.prepare({
      args,
      options: { text, flag: (name) => values[name] === true },
      actor,
    });
    const url = resolveDatabaseUrl(text('database-url'), env);
    const opened = openPool(url, env);
    sql = opened;
    const admin = createAdmin({ sql, schema });
    const handshaking = handshake(opened);
    const output = await Promise.race([
      work(admin).catch(async (error: unknown) => {
        // postgres.js 4 fails the command's statements at once when the peer is not PostgreSQL, as
        // it fails the handshake's: the handshake's one line says what happened.
        if (isNotPostgres(error)) await handshaking;
        throw error;
      }),
      handshaking.then(() => {
        pool.connected = true;
        return new Promise<never>(() => undefined); // the command's own outcome decides
      }),
    ]);
    process.stdout.write(`${terminalSafe(output)}\n`);
    return EXIT_CODES.success;
  } catch (error) {
    const failure = describeFailure(error, schema);
    process.stderr.write(terminalSafe(json ? `${failureJson(failure)}\n` : `sluice: ${failure.message}\n`));
    return failure.exitCode;
  } finally {
    // Always close the pool, or its idle connections keep the process alive. A pool that never
    // connected has nothing to finish: end it at once (it may be in the middle of an attempt).
    await sql?.end({ timeout: pool.connected ? 5 : 0 }).catch(() => undefined);
    leftovers.abandonedAttempt = sql !== undefined && !pool.connected;
  }
}

// `sluice status | head -1` closes stdout early: that is not an error worth a stack trace.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code !== 'EPIPE') throw error;
});

const exitCode = await main(process.argv.slice(2), process.env);
process.exitCode = exitCode;
if (exitCode !== EXIT_CODES.success && leftovers.abandonedAttempt) process.exit(exitCode);
// Everything is closed by now and Node exits on its own. Should something still hold the event loop
// (a bug), an operator's shell or a script must not hang: say so and exit anyway. unref() keeps
// this timer from being that something.
setTimeout(() => {
  process.stderr.write('sluice: something kept the process alive after the command finished; exiting\n');
  process.exit(exitCode);
}, 2_000).unref();

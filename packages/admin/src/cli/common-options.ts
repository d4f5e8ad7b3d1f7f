import { userInfo } from 'node:os';
import type { OptionSpec } from './command.js';
import { UsageError } from './usage-error.js';

/** Options every command takes. */
export const COMMON_OPTIONS = {
  'database-url': {
    type: 'string',
    value: 'url',
    description:
      'PostgreSQL URL of the primary (default: the DATABASE_URL environment variable); ' +
      'connect_timeout=<seconds> in it (or PGCONNECT_TIMEOUT) changes the connect timeout of 10 s',
  },
  schema: { type: 'string', value: 'name', description: 'the Sluice schema (default: sluice)' },
  actor: {
    type: 'string',
    value: 'name',
    description: 'who acts, recorded in the audit (default: cli:<OS user name>)',
  },
  help: { type: 'boolean', description: 'print this help and exit' },
  version: { type: 'boolean', description: 'print the version of the sluice CLI and exit' },
} as const satisfies Record<string, OptionSpec>;

/** `--database-url`, else DATABASE_URL; neither is a usage error. */
export function resolveDatabaseUrl(option: string | undefined, env: NodeJS.ProcessEnv): string {
  const url = option ?? env['DATABASE_URL'];
  if (url === undefined || url === '') {
    throw new UsageError(
      'no database given: pass --database-url <url> or set the DATABASE_URL environment variable',
    );
  }
  const timeouts: [string, string | undefined][] = [
    ['connect_timeout in the URL', /[?&]connect_timeout=([^&#]*)/.exec(url)?.[1]],
    ['PGCONNECT_TIMEOUT', env['PGCONNECT_TIMEOUT'] || undefined],
  ];
  for (const [where, value] of timeouts) {
    // At most what a Node.js timer holds (2^31 - 1 ms): postgres.js times the connection with one.
    if (
      value !== undefined &&
      !(/^\d+(\.\d+)?$/.test(value) && Number(value) > 0 && Number(value) <= 2_147_483)
    ) {
      throw new UsageError(`${where} must be a positive number of seconds up to 2147483, got "${value}"`);
    }
  }
  // The port of each host (host:port, or [v6]:port, comma-separated): postgres.js would throw a
  // RangeError of Node's for one beyond 65535 instead of trying to connect.
  const hosts = url.replace(/^postgres(ql)?:\/\//i, '').split(/[/?#]/)[0] ?? '';
  for (const host of hosts.slice(hosts.lastIndexOf('@') + 1).split(',')) {
    const port = /:(\d*)$/.exec(host)?.[1];
    if (port !== undefined && port !== '' && Number(port) > 65_535) {
      throw new UsageError(`the database URL's port must be from 1 to 65535, got ${port}`);
    }
  }
  if (!/^postgres(ql)?:\/\//i.test(url)) {
    throw new UsageError(
      `the database URL must start with postgres:// or postgresql:// (${option === undefined ? 'DATABASE_URL' : '--database-url'})`,
    );
  }
  return url;
}

/** `cli:` and the OS user name; userInfo() throws when the uid has no passwd entry (containers). */
export function defaultActor(env: NodeJS.ProcessEnv): string {
  let user: string | undefined;
  try {
    user = userInfo().username;
  } catch {
    user = env['USER'] ?? env['LOGNAME'];
  }
  return `cli:${user === undefined || user === '' ? 'unknown' : user}`;
}

/** `--json`, for the commands that can print their result as JSON. */
export const JSON_OPTION = {
  type: 'boolean',
  description:
    'print JSON instead of text: the result on stdout (ids and cursors as strings, times in ISO 8601); ' +
    'a failure on stderr as one line {"code", "message", "exitCode"}',
} as const satisfies OptionSpec;

/** `--instance`, for the commands that act on one cursor row. */
export const INSTANCE_OPTION = {
  type: 'string',
  value: 'id',
  description: 'the instance of a per-instance consumer (default: the shared row, or the only one)',
} as const satisfies OptionSpec;

/** `--reason`, kept in the audit. */
export const REASON_OPTION = {
  type: 'string',
  value: 'text',
  description: 'why, kept in the audit',
} as const satisfies OptionSpec;

/** `--key`, for the commands that act on one parked key (docs/design.md §11.4). */
export const KEY_OPTION = {
  type: 'string',
  value: 'key',
  description:
    "the parked key, as the KEY column of sluice parked shows it: a stream id, or the value of the consumer's laneKey field",
  required: true,
} as const satisfies OptionSpec;

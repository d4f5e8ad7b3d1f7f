// Runs the built `sluice` binary (dist/cli/main.js) as an operator would, against a real database:
// exit codes, stdout/stderr and the database state after each command.
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { createServer as createTcpServer } from 'node:net';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { userInfo } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Consumer, EventRecord } from '@sluice/core';
import { tables } from '@sluice/core/internal';
import { readFileSync } from 'node:fs';
import {
  appendEvents,
  consumerRow,
  drainUntilIdle,
  failingOn,
  freshSchema,
  holdGap,
  recordingConsumer,
  postgresJsMajor,
} from '@sluice/testing';
import {
  listening,
  registeredDispatcher,
  setDatabaseSettings,
  testDispatcher,
  useTestDatabase,
} from '@sluice/testing/vitest';
import { beforeAll, describe, expect, onTestFinished, test } from 'vitest';
import { UNSAFE } from './format-text.js';

const PACKAGE_DIR = fileURLToPath(new URL('../../', import.meta.url));
const MAIN = join(PACKAGE_DIR, 'dist', 'cli', 'main.js');
const BUILD_HINT =
  'build it first: cd packages/core && npx tsc -p tsconfig.build.json && cd ../admin && npx tsc -p tsconfig.build.json ' +
  "(turbo runs the build before this package's tests)";

/** The newest modification time of the admin sources the binary is built from. */
function newestSourceMs(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, newestSourceMs(path));
    else if (entry.name.endsWith('.ts') && !entry.name.includes('.test.')) {
      newest = Math.max(newest, statSync(path).mtimeMs);
    }
  }
  return newest;
}

beforeAll(() => {
  if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: these tests run the built CLI; ${BUILD_HINT}`);
  if (newestSourceMs(join(PACKAGE_DIR, 'src')) > statSync(MAIN).mtimeMs) {
    throw new Error(`${MAIN} is older than packages/admin/src: rebuild it; ${BUILD_HINT}`);
  }
});

const db = await useTestDatabase();

// The child gets no DATABASE_URL (the test server's may point at another database) and no
// NODE_OPTIONS (the test runner's could make it resolve packages to their TypeScript sources).
const childEnv: NodeJS.ProcessEnv = Object.fromEntries(
  Object.entries(process.env).filter(([key]) => key !== 'DATABASE_URL' && key !== 'NODE_OPTIONS'),
);

interface Run {
  /** null when the process was killed (it hung). */
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `node dist/cli/main.js …args`; a process still running after 20 s is killed (code null). */
function run(args: readonly string[], env: NodeJS.ProcessEnv = childEnv): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [MAIN, ...args], { env, timeout: 20_000 });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.on('error', reject);
    child.on('close', (code) => {
      resolve({ code, stdout, stderr });
    });
  });
}

/** Expects success (exit 0, nothing on stderr) and gives stdout. */
async function ok(pending: Promise<Run>): Promise<string> {
  const { code, stdout, stderr } = await pending;
  expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
  return stdout;
}

/** Expects success and parses stdout as JSON. */
async function json<T>(pending: Promise<Run>): Promise<T> {
  return JSON.parse(await ok(pending)) as T;
}

type Row = Record<string, unknown>;

/** The CLI on this test file's database and the given schema. */
function sluice(schema: string, ...args: string[]): Promise<Run> {
  return run([...args, '--database-url', db.url, '--schema', schema]);
}

/** `consumers` registered in a fresh schema; no automatic re-arm while a test looks at a dead one. */
const registered = (consumers: readonly Consumer[]) =>
  registeredDispatcher(db.sql, consumers, { rearmCooldownMs: 3_600_000 }, 'cli');

async function countOf(schema: string, table: 'audit' | 'deadLetters'): Promise<number> {
  const [row] = await db.sql<
    { n: number }[]
  >`select count(*)::int as n from ${tables(db.sql, schema)[table]}`;
  return row?.n ?? -1;
}

/**
 * `healthy` at event 3 and `mailer` dead on event 2 (cursor 1); then 2 more events, so both are
 * behind a head of 5.
 */
async function deadAndBehind() {
  const healthy = recordingConsumer('healthy');
  const mailer = failingOn('mailer', (e) => e.id === 2n, { errorPolicy: { maxAttempts: 1 } });
  const { schema, dispatcher } = await registered([healthy.consumer, mailer.consumer]);
  await appendEvents(db.sql, 3, undefined, schema);
  await drainUntilIdle(dispatcher);
  await appendEvents(db.sql, 2, undefined, schema);
  expect(await consumerRow(db.sql, schema, 'mailer')).toMatchObject({
    cursor: 1n,
    status: 'dead',
    stuckEventId: 2n,
  });
  expect(await consumerRow(db.sql, schema, 'healthy')).toMatchObject({ cursor: 3n, status: 'idle' });
  return { schema, dispatcher, healthy, mailer };
}

/** `indexer` skipped event 2 with skipApplyErrors (a dead letter) while `poisoned` is true. */
async function withDeadLetter() {
  const state = { poisoned: true };
  const indexer = failingOn('indexer', (e) => state.poisoned && e.id === 2n, {
    errorPolicy: { maxAttempts: 1, skipApplyErrors: true },
  });
  const { schema, dispatcher } = await registered([indexer.consumer]);
  await appendEvents(db.sql, 3, undefined, schema);
  await drainUntilIdle(dispatcher);
  expect(indexer.ids()).toEqual([1n, 3n]);
  return { schema, dispatcher, indexer, state };
}

/**
 * `reactor`, run as 3 lanes keyed by stream (s-0 … s-5, event n + 1 on stream s-(n % 6)), its
 * handler failing on the streams in `broken`; with `parkKey` such a stream's key is parked.
 */
async function lanedReactor(broken: ReadonlySet<string>, parkKey = true) {
  const seen: EventRecord[] = [];
  const { schema, dispatcher } = await registered([
    {
      name: 'reactor',
      lanes: 3,
      errorPolicy: parkKey ? { maxAttempts: 1, parkKey: true } : { maxAttempts: 1 },
      handler: (event) => {
        if (broken.has(event.streamId)) throw new Error(`cannot handle ${event.streamId}`);
        seen.push(event);
      },
    },
  ]);
  const byStream = (n: number) => ({ streamId: `s-${n % 6}`, type: 'Placed', data: { n } });
  const append = (count: number) => appendEvents(db.sql, count, byStream, schema);
  return { schema, dispatcher, seen, append };
}

/** `reactor` (see lanedReactor) after 24 events, with s-1 … s-4 parked: 4 events each. */
async function withParkedKeys() {
  const broken = new Set(['s-1', 's-2', 's-3', 's-4']);
  const laned = await lanedReactor(broken);
  await laned.append(24);
  await drainUntilIdle(laned.dispatcher);
  return { ...laned, broken };
}

const VERBS = {
  status: ['--json'],
  diagnose: ['<name>', '--instance', '--json'],
  restart: ['<name>', '--from', '--instance', '--reason'],
  disable: ['<name>', '--for', '--until', '--reason', '--instance'],
  enable: ['<name>', '--instance', '--reason'],
  skip: ['<name>', '--event', '--instance', '--reason'],
  fence: ['<name>', '<event-id>', '--instance', '--reason', '--json'],
  'dead-letters': ['<name>', '--instance', '--limit', '--json'],
  replay: ['<name>', '--ids', '--limit', '--dry-run', '--instance', '--reason'],
  parked: ['<name>', '--limit', '--json'],
  'parked-events': ['<name>', '--key', '--limit', '--json'],
  'replay-key': ['<name>', '--key', '--reason', '--json'],
  'drop-key': ['<name>', '--key', '--reason', '--json'],
  relane: ['<name>', '--lanes', '--reason', '--json'],
  rebuild: ['<action>', '[<name>]', '--force', '--drop-source', '--reason', '--json'],
  audit: ['--consumer', '--limit', '--json'],
} as const;

describe('help', () => {
  test('sluice --help lists every command, the common options and the exit codes, and needs no database', async () => {
    const help = await ok(run(['--help']));
    for (const verb of Object.keys(VERBS)) expect(help).toMatch(new RegExp(`^  ${verb} `, 'm'));
    for (const option of ['--database-url', '--schema', '--actor', '--version', 'DATABASE_URL'])
      expect(help).toContain(option);
    expect(help).toContain('With --json a failure is one line of JSON on stderr');
    expect(help).toContain('Exit codes:');
    for (const code of ['0', '1', '2', '3', '4', '5'])
      expect(help).toMatch(new RegExp(`^  ${code}  \\S`, 'm'));
  });

  test('every command has --help that exits 0 and names its arguments and options', async () => {
    const helps = await Promise.all(
      Object.entries(VERBS).map(async ([verb, options]) => ({
        verb,
        options,
        help: await ok(run([verb, '--help'])),
      })),
    );
    for (const { verb, options, help } of helps) {
      expect(help, verb).toContain(`Usage: sluice ${verb}`);
      for (const option of [...options, '--database-url']) expect(help, verb).toContain(option);
    }
    // -h and `sluice help <verb>` say the same.
    const short = await ok(run(['skip', '-h']));
    expect(short).toBe(helps.find((h) => h.verb === 'skip')?.help);
    expect(await ok(run(['help', 'skip']))).toBe(short);
  });

  test('--version alone prints the version of @sluice/admin and needs no database; beside a command it is a usage error', async () => {
    const { version } = JSON.parse(readFileSync(join(PACKAGE_DIR, 'package.json'), 'utf8')) as {
      version: string;
    };
    expect(version).toMatch(/^\d+\.\d+\.\d+/);
    expect(await ok(run(['--version']))).toBe(`${version}\n`);
    expect(await json<{ version: string }>(run(['--json', '--version']))).toEqual({ version });
    // With the options every command takes, as a wrapper adds them.
    expect(await ok(run(['--database-url', 'postgres://nowhere/db', '--schema=app', '--version']))).toBe(
      `${version}\n`,
    );
    // Beside a command it did nothing and exited 0: `rebuild approve stats --version 2` approved nothing.
    for (const line of [
      ['status', '--version'],
      ['rebuild', 'approve', 'stats', '--version', '2'],
    ]) {
      const failed = await run(line);
      expect(failed.code, line.join(' ')).toBe(2);
      expect(failed.stderr).toContain('--version goes alone');
      expect(failed.stdout).toBe('');
    }
    expect(await json<{ version: string }>(run(['--version', '--json']))).toEqual({ version });
  });

  test('rebuild refuses an option of another action (exit 2) instead of ignoring it, before any database', async () => {
    for (const [line, told] of [
      [['rebuild', 'status', 'stats@v7'], '<name>@v<N> is for a change, not status'],
      [['rebuild', 'status', '--reason', 'x'], '--reason is for a change, not status'],
      [['rebuild', 'pause', 'stats', '--force'], '--force is for approve, not pause'],
      [['rebuild', 'approve', 'stats', '--drop-source'], '--drop-source is for drop, not approve'],
    ] as const) {
      const failed = await run([...line, '--database-url', 'postgres://nowhere.invalid/db']);
      expect([failed.code, failed.stdout], line.join(' ')).toEqual([2, '']);
      expect(failed.stderr, line.join(' ')).toContain(told);
    }
  });

  test('no command at all prints the help on stderr and exits 2', async () => {
    const result = await run([]);
    expect(result.code).toBe(2);
    expect(result.stdout).toBe('');
    expect(result.stderr).toContain('Usage: sluice <command>');
  });
});

describe('status', () => {
  test('prints an aligned table: a consumer behind and a dead one with its last error', async () => {
    const { schema } = await deadAndBehind();
    const [header, ...rows] = (await ok(sluice(schema, 'status'))).trimEnd().split('\n');
    expect(header?.split(/\s{2,}/)).toEqual([
      'NAME',
      'INSTANCE',
      'STATUS',
      'CURSOR',
      'HEAD',
      'LAG',
      'GAPS',
      'ATTEMPTS',
      'LAST ERROR',
    ]);
    expect(rows).toHaveLength(2);
    const healthy = rows.find((r) => r.startsWith('healthy'));
    const mailer = rows.find((r) => r.startsWith('mailer'));
    expect(healthy?.split(/\s{2,}/)).toEqual([
      'healthy',
      '*',
      'idle',
      '3',
      '5',
      expect.stringMatching(/^2 \(\d+s\)$/),
      '0',
      '0',
      '-',
    ]);
    expect(mailer?.split(/\s{2,}/)).toEqual([
      'mailer',
      '*',
      'dead',
      '1',
      '5',
      expect.stringMatching(/^4 \(\d+s\)$/),
      '0',
      '1',
      'poison event 2',
    ]);
    // Aligned: the last column starts at the same place on every line, and numbers are
    // right-aligned under their title.
    expect(mailer?.indexOf('poison event 2')).toBe(header?.indexOf('LAST ERROR'));
    expect(mailer?.[(header?.indexOf('HEAD') ?? 0) + 'HEAD'.length - 1]).toBe('5');
  });

  test('--json prints every row, ids and cursors as strings and times in ISO 8601', async () => {
    const { schema } = await deadAndBehind();
    const rows = await json<Row[]>(sluice(schema, 'status', '--json'));
    expect(rows.map((r) => r['name'])).toEqual(['healthy', 'mailer']);
    expect(rows[0]).toMatchObject({
      instanceId: '*',
      status: 'idle',
      cursor: '3',
      head: '5',
      lagEvents: '2',
      lastError: null,
    });
    expect(rows[1]).toMatchObject({
      status: 'dead',
      cursor: '1',
      head: '5',
      lagEvents: '4',
      attempts: 1,
      stuckEventId: '2',
      lastError: 'poison event 2',
      disabledUntil: null,
    });
    expect(rows[1]?.['lastErrorAt']).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  });

  test("times read as on any database where DateStyle is 'SQL, DMY' and the time zone a named one", async () => {
    // The dispatcher runs before (it refuses such sessions: SLUICE_POSTGRES_UNSUPPORTED); the CLI's
    // own connection, opened after, takes the database's settings.
    const { schema } = await deadAndBehind();
    await setDatabaseSettings(db, { datestyle: 'SQL, DMY', timezone: 'America/New_York' });
    const rows = await json<Row[]>(sluice(schema, 'status', '--json'));
    const [now] = await db.sql<{ ms: number }[]>`select extract(epoch from now())::float8 * 1000 as ms`;
    const lastErrorAt = Date.parse(String(rows[1]?.['lastErrorAt']));
    expect(Math.abs(lastErrorAt - (now?.ms ?? 0))).toBeLessThan(60_000);
  });

  test('with no consumers it says so, and --json prints []', async () => {
    const schema = await freshSchema(db.sql, 'cli');
    expect(await ok(sluice(schema, 'status'))).toBe('no consumers are registered\n');
    expect(await ok(sluice(schema, 'status', '--json'))).toBe('[]\n');
  });
});

describe('diagnose', () => {
  test('names the last error and the stuck event of a dead consumer', async () => {
    const { schema } = await deadAndBehind();
    const text = await ok(sluice(schema, 'diagnose', 'mailer'));
    expect(text).toMatch(/^status\s+dead$/m);
    expect(text).toMatch(/^last error\s+poison event 2 \(at \d{4}-/m);
    expect(text).toContain('findings:\n- dead after 1 failed attempt(s) on event 2: poison event 2');
    expect(text).toMatch(/^- 4 event\(s\) behind the head \(5\)/m);

    const diagnosis = await json<{ consumer: Row; findings: string[] }>(
      sluice(schema, 'diagnose', 'mailer', '--json'),
    );
    expect(diagnosis.consumer).toMatchObject({ name: 'mailer', status: 'dead', stuckEventId: '2' });
    expect(diagnosis.findings[0]).toContain('poison event 2');
  });
});

describe('restart', () => {
  test('--from 0 moves the cursor, says so, and is in the audit with the OS user as actor', async () => {
    const { schema } = await deadAndBehind();
    expect(
      await ok(sluice(schema, 'restart', 'healthy', '--from', '0', '--reason', 'rebuild the index')),
    ).toBe('restarted healthy: cursor 3 → 0\n');
    expect((await consumerRow(db.sql, schema, 'healthy')).cursor).toBe(0n);

    const records = await json<Row[]>(sluice(schema, 'audit', '--json'));
    expect(records).toHaveLength(1);
    expect(records[0]).toMatchObject({
      action: 'restart',
      consumer: 'healthy',
      instanceId: '*',
      actor: `cli:${userInfo().username}`,
      cursorBefore: '3',
      cursorAfter: '0',
      details: { from: '0', reason: 'rebuild the index' },
    });
    expect(await ok(sluice(schema, 'audit', '--consumer', 'healthy'))).toMatch(
      /^\s*1 .*restart\s+healthy\s+3 → 0\s+.*rebuild the index/m,
    );
  });

  test('a dead consumer restarted from now becomes idle at the head; --actor names who did it', async () => {
    const { schema } = await deadAndBehind();
    expect(await ok(sluice(schema, 'restart', 'mailer', '--from', 'now', '--actor', 'alice'))).toBe(
      'restarted mailer: cursor 1 → 5, dead → idle\n',
    );
    expect(await consumerRow(db.sql, schema, 'mailer')).toMatchObject({
      cursor: 5n,
      status: 'idle',
      attempts: 0,
    });
    const [record] = await json<Row[]>(sluice(schema, 'audit', '--json', '--limit', '1'));
    expect(record?.['actor']).toBe('alice');
  });

  test('a target beyond the head is refused with exit 4 and changes nothing', async () => {
    const { schema } = await deadAndBehind();
    const result = await sluice(schema, 'restart', 'healthy', '--from', '99');
    expect(result.code).toBe(4);
    expect(result.stderr).toBe('sluice: Cannot restart from 99: the log head is 5\n');
    expect((await consumerRow(db.sql, schema, 'healthy')).cursor).toBe(3n);
    expect(await countOf(schema, 'audit')).toBe(0);
  });
});

describe('skip', () => {
  test('an event the consumer is not stuck on: exit 4 naming the stuck event, nothing changed', async () => {
    const { schema } = await deadAndBehind();
    const before = await consumerRow(db.sql, schema, 'mailer');
    const result = await sluice(schema, 'skip', 'mailer', '--event', '3');
    expect(result.code).toBe(4);
    expect(result.stdout).toBe('');
    expect(result.stderr).toBe('sluice: Consumer "mailer" is stuck on event 2, not 3; refusing to skip\n');
    expect(await consumerRow(db.sql, schema, 'mailer')).toEqual(before);
    expect(await countOf(schema, 'audit')).toBe(0);
    expect(await countOf(schema, 'deadLetters')).toBe(0);
  });

  test('the stuck event: exit 0, and the next turn passes it without calling the handler', async () => {
    const { schema, dispatcher, mailer } = await deadAndBehind();
    expect(await ok(sluice(schema, 'skip', 'mailer', '--event', '2', '--reason', 'bad address'))).toMatch(
      /^skipped event 2 of mailer, dead → idle;/,
    );
    expect(await countOf(schema, 'audit')).toBe(1);
    await drainUntilIdle(dispatcher);
    expect(mailer.ids()).toEqual([1n, 3n, 4n, 5n]);
    expect(mailer.failures.get(2n)).toBe(1);
    expect(await consumerRow(db.sql, schema, 'mailer')).toMatchObject({ cursor: 5n, status: 'idle' });
  });
});

describe('disable and enable', () => {
  const healthyRow = async (schema: string) =>
    (await json<Row[]>(sluice(schema, 'status', '--json'))).find((r) => r['name'] === 'healthy');

  test('disable --for 1h shows in status --json as disabled until an hour from now; enable undoes it', async () => {
    const { schema } = await deadAndBehind();
    const before = Date.now();
    const text = await ok(sluice(schema, 'disable', 'healthy', '--for', '1h', '--reason', 'maintenance'));
    const after = Date.now();
    expect(text).toMatch(/^disabled healthy until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(was idle\)\n$/);

    const disabled = await healthyRow(schema);
    expect(disabled).toMatchObject({ status: 'disabled', disabledReason: 'maintenance' });
    const until = Date.parse(String(disabled?.['disabledUntil']));
    expect(until).toBeGreaterThanOrEqual(before + 3_600_000);
    expect(until).toBeLessThanOrEqual(after + 3_600_000);

    expect(await ok(sluice(schema, 'enable', 'healthy'))).toBe('enabled healthy: disabled → idle\n');
    expect(await healthyRow(schema)).toMatchObject({
      status: 'idle',
      disabledUntil: null,
      disabledReason: null,
    });
    const actions = (await json<Row[]>(sluice(schema, 'audit', '--json'))).map((a) => a['action']);
    expect(actions).toEqual(['enable', 'disable']);
  });

  test('disable --until takes an ISO time with a zone; bad or conflicting values are usage errors', async () => {
    const { schema } = await deadAndBehind();
    const cases = [
      ['--for', '1h', '--until', '2999-01-01T00:00:00Z'],
      ['--for', '10x'],
      ['--for', '0s'],
      ['--until', '2999-01-01T00:00:00'],
      ['--until', '2999-02-30T00:00:00Z'],
      ['--until', '2000-01-01T00:00:00Z'], // in the past: refused by the admin API (SLUICE_INVALID_OPTION)
    ];
    for (const args of cases) {
      const result = await sluice(schema, 'disable', 'healthy', ...args);
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stderr, args.join(' ')).toMatch(/^sluice: .*(--for|--until|until)/);
    }
    expect((await consumerRow(db.sql, schema, 'healthy')).status).toBe('idle');
    expect(await countOf(schema, 'audit')).toBe(0);

    expect(await ok(sluice(schema, 'disable', 'healthy', '--until', '2999-01-01T12:00:00+02:00'))).toBe(
      'disabled healthy until 2999-01-01T10:00:00Z (was idle)\n',
    );
  });
});

describe('fence', () => {
  /** `reader` has a pending gap at event 1, whose insert a transaction still holds open. */
  async function heldGap() {
    const reader = recordingConsumer('reader');
    const { schema, dispatcher } = await registered([reader.consumer]);
    const held = await holdGap(db.sql, { streamId: 's', type: 'Held', data: {} }, { schema }); // id 1
    onTestFinished(() => held.release({ commit: false }));
    await appendEvents(db.sql, 1, undefined, schema); // id 2
    await dispatcher.runOnce(); // delivers 2, records the gap {1}
    await dispatcher.runOnce(); // fences it
    const [gap] = await db.sql<{ from_id: string }[]>`
      select from_id::text from ${tables(db.sql, schema).gaps} where consumer_name = 'reader'`;
    expect(gap?.from_id).toBe('1');
    return { schema, dispatcher, reader, holder: held.transaction };
  }

  test('refused while a transaction owns the id, or when the id is no pending gap (exit 4); then a tombstone takes it', async () => {
    const { schema, dispatcher, reader, holder } = await heldGap();
    const held = await sluice(schema, 'fence', 'reader', '1', '--json');
    expect(held.code).toBe(4);
    expect(held.stdout).toBe('');
    expect(JSON.parse(held.stderr)).toMatchObject({ code: 'SLUICE_GAP_HELD', exitCode: 4 });
    const notAGap = await sluice(schema, 'fence', 'reader', '2');
    expect(notAGap.code).toBe(4);
    expect(notAGap.stderr).toMatch(/^sluice: Event id 2 is not a pending gap of consumer "reader"/);
    expect(await countOf(schema, 'audit')).toBe(0);

    // The writer gave up without its transaction ending the gap's proof yet: an operator fences it.
    await holder.rollback();
    expect(await ok(sluice(schema, 'fence', 'reader', '1', '--reason', 'abandoned import'))).toBe(
      'fenced gap id 1 of reader: a tombstone holds it; every consumer waiting on it resolves it without a handler\n',
    );
    const [record] = await json<Row[]>(sluice(schema, 'audit', '--json'));
    expect(record).toMatchObject({
      action: 'fence',
      consumer: 'reader',
      details: { eventId: '1', reason: 'abandoned import' },
    });
    await drainUntilIdle(dispatcher);
    expect(reader.ids()).toEqual([2n]);
    expect((await consumerRow(db.sql, schema, 'reader')).gapCount).toBe(0);
  });
});

describe('dead letters and replay', () => {
  test('dead-letters --json lists an event skipped with skipApplyErrors', async () => {
    const { schema } = await withDeadLetter();
    const letters = await json<Row[]>(sluice(schema, 'dead-letters', 'indexer', '--json'));
    expect(letters).toHaveLength(1);
    expect(letters[0]?.['id']).toMatch(/^\d+$/);
    expect(letters[0]).toMatchObject({
      consumer: 'indexer',
      eventId: '2',
      reason: 'apply-error',
      error: 'poison event 2',
      attempts: 1,
      replayRequestedAt: null,
      replayedAt: null,
    });
    expect(await ok(sluice(schema, 'dead-letters', 'indexer'))).toMatch(
      /^\s*\d+\s+2\s+TestEvent\s+\S+\s+apply-error\s+1\s+\S+\s+-\s+poison event 2$/m,
    );
  });

  test('replay --dry-run only counts; replay has the next turn deliver the event again', async () => {
    const { schema, dispatcher, indexer, state } = await withDeadLetter();
    const letters = () => db.sql<{ replay_requested_at: Date | null; replayed_at: Date | null }[]>`
      select replay_requested_at, replayed_at from ${tables(db.sql, schema).deadLetters}`;

    expect(await ok(sluice(schema, 'replay', 'indexer', '--dry-run'))).toMatch(
      /^dry run: would replay 1 dead letter\(s\) of indexer \(ids \d+\)\n$/,
    );
    expect(await letters()).toEqual([{ replay_requested_at: null, replayed_at: null }]);
    expect(await countOf(schema, 'audit')).toBe(0);

    state.poisoned = false;
    expect(await ok(sluice(schema, 'replay', 'indexer', '--reason', 'fixed the index'))).toMatch(
      /^replay requested for 1 dead letter\(s\) of indexer \(ids \d+\)/,
    );
    expect((await letters())[0]?.replay_requested_at).toBeInstanceOf(Date);
    expect(await countOf(schema, 'audit')).toBe(1);

    await dispatcher.runOnce();
    expect(indexer.ids()).toEqual([1n, 3n, 2n]);
    expect((await letters())[0]?.replayed_at).toBeInstanceOf(Date);
  });

  test('replay --ids takes dead-letter ids; one that is not there refuses them all (exit 3)', async () => {
    const { schema } = await withDeadLetter();
    const [letter] = await json<Row[]>(sluice(schema, 'dead-letters', 'indexer', '--json'));
    const id = String(letter?.['id']);
    expect(await ok(sluice(schema, 'replay', 'indexer', '--ids', id, '--dry-run'))).toBe(
      `dry run: would replay 1 dead letter(s) of indexer (ids ${id})\n`,
    );
    const refused = await sluice(schema, 'replay', 'indexer', '--ids', `${id},999`);
    expect(refused).toMatchObject({ code: 3, stdout: '' });
    expect(refused.stderr).toContain('Consumer "indexer" has no dead letter 999');
    expect(await json<Row[]>(sluice(schema, 'dead-letters', 'indexer', '--json'))).toEqual([letter]);
  });
});

describe('payloads nested deeper than JSON.stringify can write', () => {
  // Written as text: PostgreSQL stores deeper jsonb than a call stack can serialise.
  const nested = (depth: number) => `${'{"next":['.repeat(depth)}{"leaf":1}${']}'.repeat(depth)}`;
  const NOT_SHOWN = '[nested deeper than 1000 levels: not shown]';

  /** How many levels `value` nests along `next` and its first item before a leaf, and that leaf. */
  function depthOf(value: unknown): { levels: number; leaf: unknown } {
    let levels = 0;
    let at = value;
    for (;;) {
      if (Array.isArray(at)) at = at[0];
      else if (typeof at === 'object' && at !== null && 'next' in at) at = at.next;
      else return { levels, leaf: at };
      levels += 1;
    }
  }

  test('dead-letters --json shows the first thousand levels and says what lies deeper', async () => {
    const { schema } = await withDeadLetter();
    await db.sql`update ${tables(db.sql, schema).deadLetters}
                 set data = ${nested(3_000)}::text::jsonb, metadata = ${nested(3_000)}::text::jsonb`;
    const [letter] = await json<Row[]>(sluice(schema, 'dead-letters', 'indexer', '--json'));
    expect(letter).toMatchObject({ consumer: 'indexer', eventId: '2' });
    // The list and the letter take two levels: 998 of the payload's are shown.
    expect(depthOf(letter?.['data'])).toEqual({ levels: 998, leaf: NOT_SHOWN });
    expect(depthOf(letter?.['metadata'])).toEqual({ levels: 998, leaf: NOT_SHOWN });
  });

  test('parked-events --json shows the first thousand levels and says what lies deeper', async () => {
    const { schema } = await withParkedKeys();
    await db.sql`update ${tables(db.sql, schema).parkedEvents} set data = ${nested(3_000)}::text::jsonb
                 where key = 's-1' and event_id = 2`;
    const [event] = await json<Row[]>(
      sluice(schema, 'parked-events', 'reactor', '--key', 's-1', '--limit', '1', '--json'),
    );
    expect(event).toMatchObject({ key: 's-1', eventId: '2', metadata: {} });
    expect(depthOf(event?.['data'])).toEqual({ levels: 998, leaf: NOT_SHOWN });
  });
});

describe('terminal safety', () => {
  test('control characters and bidi overrides from names and errors never reach the terminal raw', async () => {
    const name = 'x\u001b]0;owned\u0007\u202e';
    const { schema, dispatcher } = await registered([
      {
        name,
        errorPolicy: { maxAttempts: 1, skipApplyErrors: true },
        handler: () => {
          throw new Error('bad \u001b[2J\u001b[1;1H\u009b31mALL GOOD\r');
        },
      },
    ]);
    await appendEvents(db.sql, 1, undefined, schema);
    await drainUntilIdle(dispatcher);
    for (const args of [
      ['status'],
      ['dead-letters', name],
      ['dead-letters', name, '--json'],
      ['diagnose', 'nobody\u001b[2J'],
    ]) {
      const { stdout, stderr } = await sluice(schema, ...args);
      const shown = stdout + stderr;
      expect(shown.match(UNSAFE)).toBeNull();
      expect(shown).toContain('\\u001b');
    }
    const [letter] = await json<Row[]>(sluice(schema, 'dead-letters', name, '--json'));
    expect(letter?.['error']).toBe('bad \u001b[2J\u001b[1;1H\u009b31mALL GOOD\r'); // JSON keeps it exact
  });
});

describe('lanes and parked keys', () => {
  test('parked lists the parked keys and parked-events the events of one, as tables and with --json', async () => {
    const { schema } = await withParkedKeys();
    const [header, ...rows] = (await ok(sluice(schema, 'parked', 'reactor'))).trimEnd().split('\n');
    expect(header?.split(/\s{2,}/)).toEqual([
      'KEY',
      'FIRST EVENT',
      'EVENTS',
      'ATTEMPTS',
      'PARKED',
      'REPLAY',
      'ERROR',
    ]);
    expect(rows.map((r) => r.split(/\s{2,}/))).toEqual(
      [2, 3, 4, 5].map((first): unknown[] => [
        `s-${first - 1}`,
        String(first),
        '4',
        '1',
        expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/),
        '-',
        `cannot handle s-${first - 1}`,
      ]),
    );
    const keys = await json<Row[]>(sluice(schema, 'parked', 'reactor', '--json', '--limit', '1'));
    expect(keys).toHaveLength(1);
    expect(keys[0]).toEqual({
      key: 's-1',
      firstEventId: '2',
      error: 'cannot handle s-1',
      attempts: 1,
      parkedAt: keys[0]?.['parkedAt'],
      events: 4,
      replayRequestedAt: null,
    });
    expect(keys[0]?.['parkedAt']).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);

    const [eventsHeader, ...events] = (await ok(sluice(schema, 'parked-events', 'reactor', '--key', 's-1')))
      .trimEnd()
      .split('\n');
    expect(eventsHeader?.split(/\s{2,}/)).toEqual(['EVENT', 'TYPE', 'STREAM', 'CREATED', 'PARKED', 'ERROR']);
    expect(events.map((r) => r.trim().split(/\s{2,}/))).toEqual(
      [2, 8, 14, 20].map((id): unknown[] => [
        String(id),
        'Placed',
        's-1',
        expect.stringMatching(/Z$/),
        expect.stringMatching(/Z$/),
        id === 2 ? 'cannot handle s-1' : '-',
      ]),
    );
    const payloads = await json<Row[]>(
      sluice(schema, 'parked-events', 'reactor', '--key', 's-1', '--limit', '2', '--json'),
    );
    expect(payloads).toEqual([
      expect.objectContaining({
        key: 's-1',
        eventId: '2',
        data: { n: 1 },
        metadata: {},
        error: 'cannot handle s-1',
      }),
      expect.objectContaining({ key: 's-1', eventId: '8', data: { n: 7 }, metadata: {}, error: null }),
    ]);
  });

  test('status and diagnose show lanes as "lane k of N" and the parked keys, as text and with --json', async () => {
    const { schema } = await withParkedKeys();
    const [header, ...lines] = (await ok(sluice(schema, 'status'))).trimEnd().split('\n');
    expect(header?.split(/\s{2,}/).slice(0, 3)).toEqual(['NAME', 'INSTANCE', 'STATUS']);
    expect(lines.slice(0, 3).map((r) => r.split(/\s{2,}/).slice(0, 5))).toEqual(
      [0, 1, 2].map((k) => ['reactor', `lane ${k} of 3`, 'idle', '24', '24']),
    );
    expect(lines.slice(3)).toEqual([
      '',
      'reactor: 4 parked key(s), their events set aside (sluice parked reactor)',
    ]);
    const rows = await json<Row[]>(sluice(schema, 'status', '--json'));
    expect(rows.map((r) => [r['instanceId'], r['lane'], r['parkedKeys'], r['laneChange']])).toEqual(
      [0, 1, 2].map((index) => [`*${index}/3`, { index, count: 3 }, 4, null]),
    );

    const text = await ok(sluice(schema, 'diagnose', 'reactor'));
    expect(text).toMatch(/^consumer\s+reactor$/m);
    expect(text).toMatch(/^lanes\s+3$/m);
    expect(text).toMatch(/^parked keys\s+4 \(sluice parked reactor\)$/m);
    expect(text).not.toMatch(/^lane change/m);
    expect(text).toContain('findings:\n- 4 parked key(s): their events are set aside');
    expect(await ok(sluice(schema, 'diagnose', 'reactor', '--instance', '*1/3'))).toMatch(
      /^consumer\s+reactor \(lane 1 of 3\)$/m,
    );
    const diagnosis = await json<{ consumer: Row & { lanes: Row[] }; lanes: { consumer: Row }[] }>(
      sluice(schema, 'diagnose', 'reactor', '--json'),
    );
    expect(diagnosis.consumer).toMatchObject({
      instanceId: '*',
      lane: null,
      parkedKeys: 4,
      laneChange: null,
    });
    expect(diagnosis.consumer.lanes.map((l) => l['lane'])).toEqual(
      [0, 1, 2].map((index) => ({ index, count: 3 })),
    );
    expect(diagnosis.lanes.map((l) => l.consumer['instanceId'])).toEqual(['*0/3', '*1/3', '*2/3']);
  });

  test('a lane stuck on an event is named "lane k of N" in the findings and by skip', async () => {
    const { schema, dispatcher, append } = await lanedReactor(new Set(['s-1']), false);
    await append(6);
    await dispatcher.runOnce();
    const text = await ok(sluice(schema, 'diagnose', 'reactor'));
    expect(text).toMatch(/^status\s+dead$/m);
    expect(text).toMatch(
      /^- lane [0-2] of 3: dead after 1 failed attempt\(s\) on event 2: cannot handle s-1$/m,
    );
    expect(text).not.toContain('*');
    const [, ...rows] = (await ok(sluice(schema, 'status'))).trimEnd().split('\n');
    expect(rows.filter((r) => / dead /.test(r))).toEqual([
      expect.stringMatching(/^reactor\s+lane [0-2] of 3\s+dead\s/),
    ]);
    expect(await ok(sluice(schema, 'skip', 'reactor', '--event', '2'))).toMatch(
      /^skipped event 2 of reactor \(lane [0-2] of 3\), dead → idle;/,
    );
  });

  test('replay-key delivers a key again, in order; drop-key gives one up; both audited; an unknown key exits 3', async () => {
    const { schema, dispatcher, seen, broken } = await withParkedKeys();
    broken.delete('s-1');
    broken.delete('s-4');
    expect(
      await ok(sluice(schema, 'replay-key', 'reactor', '--key', 's-1', '--reason', 'fixed the template')),
    ).toMatch(
      /^replay requested for parked key s-1 of reactor \(4 event\(s\)\); the next turn of lane [0-2] of 3, which owns the key, delivers them in id order\n$/,
    );
    const replayed = await json<Row>(sluice(schema, 'replay-key', 'reactor', '--key', 's-4', '--json'));
    expect(replayed).toEqual({
      consumer: 'reactor',
      key: 's-4',
      action: 'replay-parked-key',
      events: 4,
      lane: replayed['lane'],
    });
    expect(replayed['lane']).toMatch(/^\*[0-2]\/3$/);
    const replaying = await ok(sluice(schema, 'parked', 'reactor'));
    expect(replaying).toMatch(/^s-1\s+2\s+4\s+1\s+\S+\s+requested\s/m);
    expect(replaying).toMatch(/^s-2\s+3\s+4\s+1\s+\S+\s+-\s/m);

    expect(await ok(sluice(schema, 'drop-key', 'reactor', '--key', 's-2'))).toBe(
      'dropped parked key s-2 of reactor: 4 parked event(s) deleted without delivery; its later events flow again\n',
    );
    const dropped = await json<Row>(
      sluice(schema, 'drop-key', 'reactor', '--key', 's-3', '--json', '--reason', 'obsolete'),
    );
    expect(dropped).toEqual({
      consumer: 'reactor',
      key: 's-3',
      action: 'drop-parked-key',
      events: 4,
      lane: dropped['lane'],
    });
    expect(dropped['lane']).toMatch(/^\*[0-2]\/3$/);
    await drainUntilIdle(dispatcher);
    for (const stream of ['s-1', 's-4']) {
      expect(seen.filter((e) => e.streamId === stream).map((e) => e.id)).toEqual(
        [0, 6, 12, 18].map((n) => BigInt(n + Number(stream.slice(2)) + 1)),
      );
    }
    expect(seen.filter((e) => e.streamId === 's-2' || e.streamId === 's-3')).toEqual([]);
    expect(await ok(sluice(schema, 'parked', 'reactor'))).toBe('no parked keys for reactor\n');
    expect(await ok(sluice(schema, 'parked', 'reactor', '--json'))).toBe('[]\n');
    expect((await ok(sluice(schema, 'status'))).trimEnd().split('\n')).toHaveLength(4); // no line under the table

    const audit = await json<Row[]>(sluice(schema, 'audit', '--json', '--consumer', 'reactor'));
    expect(audit.map((a) => [a['action'], a['details']])).toEqual([
      ['drop-parked-key', { key: 's-3', events: 4, reason: 'obsolete' }],
      ['drop-parked-key', { key: 's-2', events: 4, reason: null }],
      ['replay-parked-key', { key: 's-4', events: 4, reason: null }],
      ['replay-parked-key', { key: 's-1', events: 4, reason: 'fixed the template' }],
    ]);
    expect(await ok(sluice(schema, 'audit', '--consumer', 'reactor'))).toMatch(
      /^\s*\d+ .*drop-parked-key\s+reactor \(lane [0-2] of 3\)\s+24\s+.*"key":"s-3"/m,
    );

    const auditCount = await countOf(schema, 'audit');
    for (const args of [
      ['parked-events', 'reactor', '--key', 's-2'],
      ['replay-key', 'reactor', '--key', 's-2'],
      ['drop-key', 'reactor', '--key', 's-1'],
    ]) {
      const result = await sluice(schema, ...args);
      expect(result.code, args.join(' ')).toBe(3);
      expect(result.stdout, args.join(' ')).toBe('');
      expect(result.stderr, args.join(' ')).toBe(
        `sluice: Consumer "reactor" has no parked key "${args[3]}"\n`,
      );
    }
    const unknown = await sluice(schema, 'drop-key', 'reactor', '--key', 'nope', '--json');
    expect(unknown.code).toBe(3);
    expect(JSON.parse(unknown.stderr)).toEqual({
      code: 'SLUICE_KEY_NOT_PARKED',
      message: 'Consumer "reactor" has no parked key "nope"',
      exitCode: 3,
    });
    expect(await countOf(schema, 'audit')).toBe(auditCount);
  });

  test('relane starts a change, shown by status and diagnose; refused (exit 4) while a switched change drains', async () => {
    const { schema, dispatcher, append } = await lanedReactor(new Set());
    const gap = await holdGap(db.sql, undefined, { schema }); // id 1, held open
    onTestFinished(() => gap.release({ commit: false }));
    await append(9); // ids 2 … 10
    await dispatcher.runOnce();

    expect(await ok(sluice(schema, 'relane', 'reactor', '--lanes', '5', '--reason', 'more throughput'))).toBe(
      'changing reactor from 3 lanes to 5 lanes: the old lanes deliver up to the barrier 10, then the new lanes ' +
        'go on from there (sluice diagnose reactor shows the change)\n',
    );
    expect(await ok(sluice(schema, 'status'))).toContain(
      '\n\nreactor: changing from 3 to 5 lanes, not switched yet: the old lanes deliver up to the barrier 10, ' +
        'then the new lanes go on from there\n',
    );
    expect(await json<Row>(sluice(schema, 'relane', 'reactor', '--lanes', '4', '--json'))).toEqual({
      consumer: 'reactor',
      from: 3,
      to: 4,
      outcome: 'retargeted',
      barrier: '10',
    });
    expect(await ok(sluice(schema, 'relane', 'reactor', '--lanes', '4'))).toBe(
      'reactor is already changing from 3 lanes to 4 lanes (barrier 10): nothing changed\n',
    );
    // Every old lane is at the barrier: a turn that holds every old lane's row switches (the lanes'
    // turns run at once, so it may take a few passes); the old lanes still hold the gap.
    const switched = async () => {
      const [change] = await db.sql<{ switched: boolean }[]>`
        select switched_at is not null as switched from ${tables(db.sql, schema).laneChanges}`;
      return change?.switched === true;
    };
    for (let pass = 0; pass < 50 && !(await switched()); pass++) await dispatcher.runOnce();
    expect(await switched()).toBe(true);

    const auditCount = await countOf(schema, 'audit');
    const refused = await sluice(schema, 'relane', 'reactor', '--lanes', '2');
    expect(refused.code).toBe(4);
    expect(refused.stdout).toBe('');
    expect(refused.stderr).toMatch(/^sluice: Consumer "reactor" is still changing from 3 to 4 lanes: .*\n$/);
    const refusedJson = await sluice(schema, 'relane', 'reactor', '--lanes', '2', '--json');
    expect(refusedJson.code).toBe(4);
    expect(JSON.parse(refusedJson.stderr)).toMatchObject({
      code: 'SLUICE_LANE_CHANGE_IN_PROGRESS',
      exitCode: 4,
    });
    expect(await countOf(schema, 'audit')).toBe(auditCount);

    const rows = await json<Row[]>(sluice(schema, 'status', '--json'));
    expect(rows.map((r) => r['instanceId'])).toEqual([
      '*0/3',
      '*0/4',
      '*1/3',
      '*1/4',
      '*2/3',
      '*2/4',
      '*3/4',
    ]);
    expect(rows[0]?.['laneChange']).toEqual({ from: 3, to: 4, barrier: '10', switched: true });
    expect(await ok(sluice(schema, 'status'))).toContain(
      '\n\nreactor: changing from 3 to 4 lanes, switched at the barrier 10; the old lanes go once their pending gaps are resolved\n',
    );
    const text = await ok(sluice(schema, 'diagnose', 'reactor'));
    expect(text).toMatch(/^lanes\s+3 and 4 \(old and new lanes while the change drains\)$/m);
    expect(text).toMatch(/^lane change\s+from 3 to 4 lanes, switched at the barrier 10; /m);
    expect(text).toMatch(/^- lane [0-2] of 3: 1 pending gap range\(s\)/m);

    await gap.release({ commit: false });
    await drainUntilIdle(dispatcher);
    expect(await ok(sluice(schema, 'relane', 'reactor', '--lanes', '4'))).toBe(
      'reactor already runs as 4 lanes: nothing changed\n',
    );
    const audit = await json<Row[]>(sluice(schema, 'audit', '--json', '--consumer', 'reactor'));
    // The dispatcher's turns audit the switch and each retired lane; the operator's requests are these.
    const requests = audit.filter((a) => a['action'] === 'relane');
    expect(requests.map((a) => [a['actor'], a['details']])).toEqual([
      [`cli:${userInfo().username}`, { from: 3, to: 4, outcome: 'retargeted' }],
      [`cli:${userInfo().username}`, { from: 3, to: 5, outcome: 'started' }],
    ]);
  });

  test('relane of a consumer without shared rows is a usage error (exit 2)', async () => {
    const { schema } = await registeredDispatcher(
      db.sql,
      [{ name: 'local', delivery: 'per-instance', handler: () => undefined }],
      { instanceId: 'web-1' },
      'cli',
    );
    const result = await sluice(schema, 'relane', 'local', '--lanes', '2');
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(
      /^sluice: Invalid option `name`: consumer "local" has per-instance rows: only a shared consumer runs as lanes/,
    );
  });
});

describe('failures and exit codes', () => {
  test('an unknown consumer exits 3', async () => {
    const schema = await freshSchema(db.sql, 'cli');
    for (const args of [
      ['diagnose', 'nobody'],
      ['restart', 'nobody', '--from', 'now'],
      ['dead-letters', 'nobody'],
      ['parked', 'nobody'],
      ['parked-events', 'nobody', '--key', 's-1'],
      ['replay-key', 'nobody', '--key', 's-1'],
      ['drop-key', 'nobody', '--key', 's-1'],
      ['relane', 'nobody', '--lanes', '2'],
    ]) {
      const result = await sluice(schema, ...args);
      expect(result.code, args.join(' ')).toBe(3);
      expect(result.stderr, args.join(' ')).toBe('sluice: No consumer "nobody" is registered\n');
    }
  });

  test('malformed values, unknown commands and options are usage errors (exit 2), before any database work', async () => {
    // Port 1 answers nothing: exit 2 rather than 5 proves the values are checked first.
    const nowhere = 'postgres://nobody@127.0.0.1:1/nothing';
    const cases: [string[], RegExp][] = [
      [['skip', 'mailer', '--event', 'abc'], /--event/],
      [['skip', 'mailer', '--event', '0'], /--event/],
      [['skip', 'mailer'], /missing --event <id>/],
      [['restart', 'mailer', '--from', '1.5'], /--from must be 'beginning', 'now' or an event id/],
      [['restart', '--from', 'now'], /missing <name>/],
      [['dead-letters', 'mailer', '--limit', '1e3'], /--limit must be a positive integer/],
      [['replay', 'mailer', '--ids', '1,,2'], /--ids/],
      [['status', '--bogus'], /unknown option --bogus/],
      [['status', 'extra'], /unexpected argument "extra"/],
      [['frobnicate'], /unknown command "frobnicate"/],
      [['restart', 'mailer', '--from', 'beginning', '--from', 'now'], /--from is given more than once/],
    ];
    const results = await Promise.all(cases.map(([args]) => run([...args, '--database-url', nowhere])));
    const mysql = await run(['status', '--database-url', 'mysql://nobody@127.0.0.1:1/nothing']);
    expect(mysql).toMatchObject({ code: 2, stdout: '' });
    expect(mysql.stderr).toMatch(/must start with postgres:\/\/ or postgresql:\/\//);
    // postgres.js 3 refuses a bad %-escape in the user, password or database (a usage error here);
    // 4 takes it as it is (then port 1 does not answer).
    for (const password of ['pa%ZZss', 'pa%ffss']) {
      const escape = await run(['status', '--database-url', `postgres://ops:${password}@127.0.0.1:1/shop`]);
      expect(escape).toMatchObject({ code: postgresJsMajor < 4 ? 2 : 5, stdout: '' });
      if (postgresJsMajor < 4) {
        expect(escape.stderr).toContain('the database URL has a % that does not start an escape of UTF-8');
      }
      expect(escape.stderr).not.toContain(password);
    }
    // 2147484 s is beyond what a Node.js timer holds: it would fire at once ("cannot reach").
    for (const timeout of ['abc', '-1', '0', '2147484', '99999999999']) {
      const bad = await run(['status', '--database-url', `${nowhere}?connect_timeout=${timeout}`]);
      expect(bad).toMatchObject({ code: 2, stdout: '' });
      expect(bad.stderr).toContain(
        `connect_timeout in the URL must be a positive number of seconds up to 2147483, got "${timeout}"`,
      );
    }
    for (const url of ['postgres://ops@127.0.0.1:99999/shop', 'postgres://ops@a:5432,[::1]:70000/shop']) {
      const bad = await run(['status', '--database-url', url]);
      expect(bad).toMatchObject({ code: 2, stdout: '' });
      expect(bad.stderr).toMatch(/the database URL's port must be from 1 to 65535, got (99999|70000)/);
    }
    results.forEach((result, i) => {
      const [args, message] = cases[i]!;
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stdout, args.join(' ')).toBe('');
      expect(result.stderr, args.join(' ')).toMatch(/^sluice: /);
      expect(result.stderr, args.join(' ')).toMatch(message);
    });
  });

  test('a limit out of the API range and a bad schema name are usage errors', async () => {
    const schema = await freshSchema(db.sql, 'cli');
    const limit = await sluice(schema, 'audit', '--limit', '5000');
    expect(limit.code).toBe(2);
    expect(limit.stderr).toBe('sluice: --limit must be between 1 and 1000, got 5000\n');
    const badSchema = await run(['status', '--database-url', db.url, '--schema', 'Bad-Name']);
    expect(badSchema.code).toBe(2);
    expect(badSchema.stderr).toContain('Invalid option `schema`');
  });

  test('every argument error is reported before a missing database: the whole line is checked first', async () => {
    const cases: [string[], string][] = [
      [
        ['skip', 'mailer', '--event', 'abc'],
        '--event must be a positive integer id (digits only), got "abc"',
      ],
      [['fence', 'mailer'], 'missing <event-id>'],
      [['fence', 'mailer', '1.5'], '<event-id> must be a positive integer id (digits only), got "1.5"'],
      [['audit', '--limit', '5000'], '--limit must be between 1 and 1000'],
      [['dead-letters', 'mailer', '--limit', '0'], '--limit must be between 1 and 1000'],
      [['status', '--schema', 'Bad-Name'], 'Invalid option `schema`'],
      [['restart', 'mailer', '--from', 'yesterday'], "--from must be 'beginning', 'now' or an event id"],
      [['disable', 'mailer', '--for', '10x'], '--for must be a duration'],
      [['diagnose', 'n'.repeat(201)], 'Invalid option `<name>`'],
      [['enable', 'mailer', '--instance', 'i'.repeat(201)], 'Invalid option `--instance`'],
      [['enable', 'mailer', '--reason', 'r'.repeat(1001)], 'Invalid option `--reason`'],
      [['status', '--actor', 'a'.repeat(201)], 'Invalid option `--actor`'],
      [['enable', 'mailer', '--actor', ''], 'Invalid option `--actor`: must not be empty'],
      [['audit', '--consumer', 'c'.repeat(201)], 'Invalid option `--consumer`'],
      [
        ['replay', 'mailer', '--ids', Array.from({ length: 1001 }, (_, i) => i + 1).join(',')],
        '--ids takes at most 1000',
      ],
      [['parked'], 'missing <name>'],
      [['parked', 'reactor', '--limit', '0'], '--limit must be between 1 and 1000'],
      [['parked', 'reactor', '--key', 's-1'], 'unknown option --key'],
      [['parked-events', 'reactor'], 'missing --key <key>'],
      [['parked-events', 'reactor', '--key', 'k'.repeat(1001)], 'Invalid option `--key`'],
      [['parked-events', 'reactor', '--key', 's-1', '--limit', 'all'], '--limit must be a positive integer'],
      [['replay-key', 'reactor'], 'missing --key <key>'],
      [['replay-key', 'reactor', '--key', 's-1', '--reason', 'r'.repeat(1001)], 'Invalid option `--reason`'],
      [['replay-key', 'reactor', '--key', '-s'], '--key needs a value; write --key=<value>'],
      [['drop-key', 'n'.repeat(201), '--key', 's-1'], 'Invalid option `<name>`'],
      [['drop-key', 'reactor', 's-1'], 'unexpected argument "s-1"'],
      [['relane', 'reactor'], 'missing --lanes <n>'],
      [
        ['relane', 'reactor', '--lanes', 'four'],
        '--lanes must be a positive integer (digits only), got "four"',
      ],
      [['relane', 'reactor', '--lanes', '0'], '--lanes must be between 1 and 1024, got 0'],
      [['relane', 'reactor', '--lanes', '1025'], '--lanes must be between 1 and 1024, got 1025'],
    ];
    const results = await Promise.all(cases.map(([args]) => run(args)));
    results.forEach((result, i) => {
      const [args, message] = cases[i]!;
      const where = args.join(' ').slice(0, 60);
      expect(result.code, where).toBe(2);
      expect(result.stdout, where).toBe('');
      expect(result.stderr, where).toMatch(/^sluice: /);
      expect(result.stderr, where).toContain(message);
      expect(result.stderr, where).not.toContain('no database given');
    });
  });

  test('--json reports a failure as one line of JSON on stderr: code, message and exit code', async () => {
    const schema = await freshSchema(db.sql, 'cli');
    const cases: [string[], Record<string, unknown>][] = [
      [['diagnose', 'nobody', '--json'], { code: 'SLUICE_CONSUMER_NOT_FOUND', exitCode: 3 }],
      [
        ['skip', 'mailer', '--json'],
        { code: 'SLUICE_USAGE', message: 'missing --event <id> (see sluice skip --help)', exitCode: 2 },
      ],
      [['status', '--json', '--bogus'], { code: 'SLUICE_USAGE', exitCode: 2 }],
      [['frobnicate', '--json'], { code: 'SLUICE_USAGE', exitCode: 2 }],
      [['audit', '--json', '--limit', 'all'], { code: 'SLUICE_USAGE', exitCode: 2 }],
      [['skip', 'mailer', '--event', '0', '--json'], { code: 'SLUICE_INVALID_OPTION', exitCode: 2 }],
      // A malformed id is the command line's mistake; a well-formed one the admin refuses (0) is not.
      [['skip', 'mailer', '--event', 'abc', '--json'], { code: 'SLUICE_USAGE', exitCode: 2 }],
      [
        ['skip', 'mailer', '--event', '99999999999999999999', '--json'],
        { code: 'SLUICE_USAGE', exitCode: 2 },
      ],
      [['fence', 'mailer', '1x', '--json'], { code: 'SLUICE_USAGE', exitCode: 2 }],
      [['restart', 'mailer', '--from', '12a', '--json'], { code: 'SLUICE_USAGE', exitCode: 2 }],
    ];
    for (const [args, expected] of cases) {
      const result = await sluice(schema, ...args);
      expect(result.code, args.join(' ')).toBe(expected['exitCode']);
      expect(result.stdout, args.join(' ')).toBe('');
      expect(result.stderr.endsWith('\n') && result.stderr.split('\n').length === 2, args.join(' ')).toBe(
        true,
      );
      const error = JSON.parse(result.stderr) as Record<string, unknown>;
      expect(Object.keys(error), args.join(' ')).toEqual(['code', 'message', 'exitCode']);
      expect(error, args.join(' ')).toMatchObject(expected);
    }
    const missing = await run(['status', '--json']);
    expect(JSON.parse(missing.stderr)).toEqual({
      code: 'SLUICE_USAGE',
      message: 'no database given: pass --database-url <url> or set the DATABASE_URL environment variable',
      exitCode: 2,
    });
    const unreachable = await run([
      'status',
      '--json',
      '--database-url',
      'postgres://nobody@127.0.0.1:1/nothing',
    ]);
    expect(unreachable.code).toBe(5);
    expect(JSON.parse(unreachable.stderr)).toMatchObject({
      code: 'SLUICE_DATABASE_UNREACHABLE',
      exitCode: 5,
    });
    const notMigrated = await run(['status', '--json', '--database-url', db.url, '--schema', 'not_migrated']);
    expect(JSON.parse(notMigrated.stderr)).toMatchObject({
      code: 'SLUICE_SCHEMA_NOT_MIGRATED',
      exitCode: 5,
    });
    // A failure the CLI does not expect (a column of the audit table renamed under it).
    const broken = await freshSchema(db.sql, 'cli');
    await db.sql`alter table ${db.sql(`${broken}.audit`)} rename column actor to renamed_actor`;
    const unexpected = await sluice(broken, 'audit', '--json');
    expect(unexpected.code).toBe(1);
    expect(JSON.parse(unexpected.stderr)).toMatchObject({ code: 'SLUICE_UNEXPECTED', exitCode: 1 });
    // Without --json the same failures stay one line of text.
    expect((await sluice(schema, 'diagnose', 'nobody')).stderr).toBe(
      'sluice: No consumer "nobody" is registered\n',
    );
  });

  test('without --database-url or DATABASE_URL it exits 2 and says how to give one', async () => {
    const result = await run(['status']);
    expect(result.code).toBe(2);
    expect(result.stderr).toBe(
      'sluice: no database given: pass --database-url <url> or set the DATABASE_URL environment variable\n',
    );
  });

  test('DATABASE_URL is used when --database-url is not given', async () => {
    const schema = await freshSchema(db.sql, 'cli');
    expect(
      await ok(run(['status', '--json', '--schema', schema], { ...childEnv, DATABASE_URL: db.url })),
    ).toBe('[]\n');
  });

  test('an unreachable database exits 5', async () => {
    const result = await run(['status', '--database-url', 'postgres://nobody@127.0.0.1:1/nothing']);
    expect(result.code).toBe(5);
    expect(result.stderr).toMatch(/^sluice: cannot reach the database: .*ECONNREFUSED/);
  });

  test('a port that answers but is not PostgreSQL exits 5 within the connect timeout, with one line saying so', async () => {
    // An HTTP server, as the demo's own port is: postgres.js alone would reconnect to it for ever.
    const http = await listening(createServer((_request, response) => response.end('not PostgreSQL')));
    const { port } = http;
    const url = `postgres://ops:secret@127.0.0.1:${port}/shop`;

    const startedAt = performance.now();
    const result = await run(['status', '--database-url', `${url}?connect_timeout=2`]);
    const elapsedMs = performance.now() - startedAt;
    expect(result.code).toBe(5);
    expect(result.stdout).toBe('');
    expect(result.stderr).toBe(
      postgresJsMajor >= 4
        ? `sluice: cannot reach the database: no PostgreSQL server completed a connection at 127.0.0.1:${port}: ` +
            "what answers there does not speak PostgreSQL's protocol: check the host and port (is it another service?)\n"
        : `sluice: cannot reach the database: no PostgreSQL server completed a connection at 127.0.0.1:${port} ` +
            'within 2 s: check the host and port (is a PostgreSQL server listening there, and not another service?)\n',
    );
    expect(elapsedMs).toBeLessThan(2_000 + 5_000); // the timeout, Node's start and the pool's end
    if (postgresJsMajor < 4) {
      expect(elapsedMs).toBeGreaterThanOrEqual(2_000);
      expect(http.connections()).toBeGreaterThan(1); // postgres.js 3 kept reconnecting until the CLI gave up
    }

    // PGCONNECT_TIMEOUT, as libpq reads it, sets it too (the CLI's own default is 10 s), here
    // against a port that accepts and never answers.
    const silent = await listening(createTcpServer(() => undefined));
    const silentUrl = `postgres://ops:secret@127.0.0.1:${silent.port}/shop`;
    const byEnv = await run(['status', '--database-url', silentUrl], { ...childEnv, PGCONNECT_TIMEOUT: '1' });
    expect(byEnv.code).toBe(5);
    expect(byEnv.stderr).toContain('within 1 s');
  });

  test('sslmode=require against a server that speaks no TLS exits 5, saying so', async () => {
    // A PostgreSQL server without TLS answers the client's SSLRequest with 'N'.
    const noTls = await listening(
      createTcpServer((socket) => {
        socket.once('data', () => socket.write('N'));
      }),
    );
    const result = await run([
      'status',
      '--json',
      '--database-url',
      `postgres://ops:secret@127.0.0.1:${noTls.port}/shop?sslmode=require&connect_timeout=2`,
    ]);
    expect(result.code).toBe(5);
    if (postgresJsMajor >= 4) {
      expect(JSON.parse(result.stderr)).toMatchObject({ code: 'SLUICE_DATABASE_UNREACHABLE', exitCode: 5 });
      expect(result.stderr).toContain('SSL');
    } else {
      // postgres.js 3 tries again until the connect timeout ends it.
      expect(JSON.parse(result.stderr)).toMatchObject({ code: 'SLUICE_CONNECT_TIMEOUT', exitCode: 5 });
    }
  });

  test('a schema that is not migrated exits 5', async () => {
    const result = await run(['status', '--database-url', db.url, '--schema', 'not_migrated']);
    expect(result.code).toBe(5);
    expect(result.stderr).toMatch(/^sluice: Sluice schema "not_migrated" is not migrated in this database/);
  });
});

describe('rebuild', () => {
  const stats = (version: number, extra: Partial<Consumer> = {}): Consumer => ({
    name: 'stats',
    version,
    batchSize: 10,
    maxBatchSize: 10,
    handler: () => undefined,
    ...extra,
  });

  test('status shows the rebuild and its progress; approve is refused (exit 4) too far behind, goes through with --force', async () => {
    const schema = await freshSchema(db.sql, 'cli');
    await appendEvents(db.sql, 60, undefined, schema);
    const one = testDispatcher(db.sql, schema, [stats(1)]);
    await one.ensureRegistered();
    await drainUntilIdle(one);
    await one.stop();
    const both = testDispatcher(db.sql, schema, [
      stats(1),
      stats(2, { rebuild: { takeover: { withinEvents: 5 } } }),
    ]);
    await both.ensureRegistered();

    const table = await ok(sluice(schema, 'rebuild', 'status'));
    expect(table).toMatch(/^CONSUMER +LIVE +REBUILD +STATE +POSITION +HEAD +DONE +RATE +LEFT +STARTED\n/);
    expect(table).toMatch(/^stats +1 +2 +rebuilding +0 +60 +0\.0 % /m);
    const [status] = await json<Row[]>(sluice(schema, 'rebuild', 'status', 'stats', '--json'));
    expect(status?.['rebuild']).toMatchObject({ version: 2, state: 'rebuilding', lagEvents: '60' });

    const auditCount = await countOf(schema, 'audit');
    const refused = await sluice(schema, 'rebuild', 'approve', 'stats', '--json');
    expect(refused.code).toBe(4);
    expect(JSON.parse(refused.stderr)).toMatchObject({ code: 'SLUICE_REBUILD_NOT_READY', exitCode: 4 });
    expect(await countOf(schema, 'audit')).toBe(auditCount);

    expect(await ok(sluice(schema, 'rebuild', 'approve', 'stats', '--force', '--reason', 'ship it'))).toBe(
      'stats version 2 is taking over: the live version stopped at 60; it goes live once the rebuild has ' +
        'reached it (sluice rebuild status stats)\n',
    );
    for (let pass = 0; pass < 50; pass++) {
      await both.runOnce();
      const [now] = await json<Row[]>(sluice(schema, 'rebuild', 'status', 'stats', '--json'));
      if (now?.['rebuild'] === null) break;
    }
    expect(await ok(sluice(schema, 'rebuild', 'status', 'stats'))).toMatch(/^stats +2 +- +no rebuild /m);
    const missing = await sluice(schema, 'rebuild', 'pause', 'stats');
    expect(missing.code).toBe(3);
    expect(await ok(sluice(schema, 'rebuild', 'drop', 'stats@v1'))).toBe(
      'dropped stats version 1: 1 consumer row(s)\n',
    );
  });

  test('usage errors (exit 2) before any database is looked for', async () => {
    for (const args of [
      ['rebuild', 'frobnicate', 'stats'],
      ['rebuild', 'approve'],
      ['rebuild', 'drop', 'stats'],
      ['rebuild', 'approve', 'stats@v0'],
    ]) {
      const result = await run(args);
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stderr, args.join(' ')).toMatch(/^sluice: /);
    }
  });
});

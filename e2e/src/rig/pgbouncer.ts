// A real PgBouncer (Debian's `pgbouncer` package) in front of the test PostgreSQL server, on a free
// port, for the "behind a pooler" suite (docs/operating.md, "Behind a pooler").
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '@sluice/testing/processes';
import postgres from 'postgres';

export const PGBOUNCER = process.env['PGBOUNCER_PATH'] ?? '/usr/sbin/pgbouncer';

/** Whether the pgbouncer binary runs here. */
export function hasPgBouncer(): boolean {
  return spawnSync(PGBOUNCER, ['--version']).status === 0;
}

export interface PgBouncer {
  /** `url` with host and port of the pooler instead of the server's. */
  readonly url: string;
  readonly mode: 'transaction' | 'session';
  stop(): Promise<void>;
}

/**
 * Starts PgBouncer in `mode` in front of the server of `serverUrl` (any database of it, same user
 * and password: the pooler logs in with them). It runs as the `postgres` OS user when started as
 * root (PgBouncer refuses root), from a temporary folder that user can read. `settings`: more
 * lines of its [pgbouncer] section.
 */
export async function startPgBouncer(
  serverUrl: string,
  mode: 'transaction' | 'session',
  settings: readonly string[] = [],
): Promise<PgBouncer> {
  const server = new URL(serverUrl);
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), 'sluice-pgbouncer-'));
  await chmod(dir, 0o755);
  const user = decodeURIComponent(server.username);
  const password = decodeURIComponent(server.password);
  const quote = (value: string) => `"${value.replaceAll('"', '""')}"`;
  await writeFile(join(dir, 'userlist.txt'), `${quote(user)} ${quote(password)}\n`, { mode: 0o644 });
  await writeFile(
    join(dir, 'pgbouncer.ini'),
    [
      '[databases]',
      `* = host=${server.hostname} port=${server.port}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      `auth_type = plain`,
      `auth_file = ${join(dir, 'userlist.txt')}`,
      `pool_mode = ${mode}`,
      'max_client_conn = 500',
      'default_pool_size = 40',
      'ignore_startup_parameters = extra_float_digits',
      'admin_users =',
      ...settings,
      '',
    ].join('\n'),
    { mode: 0o644 },
  );
  // No logfile: it logs to stderr, which is kept for the error below (as root it runs as `postgres`,
  // which could not write into this root-owned folder).
  const asRoot = process.getuid?.() === 0;
  const child: ChildProcess = spawn(
    PGBOUNCER,
    [...(asRoot ? ['-u', 'postgres'] : []), join(dir, 'pgbouncer.ini')],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString('utf8');
  });
  const state = { running: true };
  const running = () => state.running;
  const exited = new Promise<void>((resolve) => {
    child.once('exit', () => {
      state.running = false;
      resolve();
    });
  });
  const url = new URL(serverUrl);
  url.port = String(port);
  const stop = async () => {
    if (running()) {
      child.kill('SIGTERM');
      await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 5_000))]);
      if (running()) child.kill('SIGKILL');
    }
    await rm(dir, { recursive: true, force: true });
  };
  // Ready once a session through it answers.
  const deadline = Date.now() + 15_000;
  for (;;) {
    const probe = postgres(url.toString(), {
      max: 1,
      connect_timeout: 2,
      prepare: false,
      onnotice: () => undefined,
    });
    try {
      await probe`select 1`;
      break;
    } catch (error) {
      if (!running() || Date.now() > deadline) {
        await stop();
        throw new Error(`PgBouncer did not start: ${(error as Error).message}\n${stderr}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    } finally {
      await probe.end({ timeout: 1 });
    }
  }
  return { url: url.toString(), mode, stop };
}

// `pnpm start`'s server as a user runs it: a child process on an embedded PostgreSQL, in a data
// folder of its own. Restarted on the same folder it serves the same dashboard URL and password
// and the same database URL; a fresh folder gets a new password.
import { fileURLToPath } from 'node:url';
import { spawn } from 'node:child_process';
import { lstat, mkdtemp, readFile, readlink, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { expect, onTestFinished, test } from 'vitest';

const APP_DIR = fileURLToPath(new URL('..', import.meta.url));

interface Started {
  readonly dashboard: string;
  readonly password: string;
  readonly database: string;
  /** Ctrl+C: resolves with the exit code and everything the server printed. */
  stop(): Promise<{ code: number | null; output: string }>;
}

/** Starts `src/server.ts` as `pnpm start` does, on `dataDir`, and waits for its banner. */
async function start(dataDir: string): Promise<Started> {
  const env: NodeJS.ProcessEnv = { ...process.env, DEMO_DATA_DIR: dataDir, PORT: '0', HOST: '127.0.0.1' };
  // The embedded PostgreSQL, whatever the test run itself uses; the password it keeps, not one given.
  delete env['DATABASE_URL'];
  delete env['DEMO_OPS_PASSWORD'];
  // As `pnpm start` runs it: node with tsx as a loader. Not the tsx CLI, which relays Ctrl+C to its
  // child and exits 130 when the child's answer is late (a loaded CI machine met it).
  const child = spawn(process.execPath, ['--conditions=@sluice/source', '--import', 'tsx', 'src/server.ts'], {
    cwd: APP_DIR,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  const exited = new Promise<number | null>((done) => {
    child.once('exit', (code) => {
      done(code);
    });
  });
  onTestFinished(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGINT');
      await exited;
    }
  });
  const banner = await Promise.race([
    new Promise<string>((done) => {
      const check = () => {
        if (output.includes('Ctrl+C stops the server')) done(output);
      };
      child.stdout.on('data', check);
      check();
    }),
    exited.then((code) => {
      throw new Error(`the demo exited (${code}) before it was running:\n${output}`);
    }),
  ]);
  const dashboard = /Ops dashboard\s+(\S+)\s+user: ops\s+password: (\S+)/.exec(banner);
  const database = /Database\s+(postgres:\S+)/.exec(banner);
  if (!dashboard || !database) throw new Error(`unexpected banner:\n${banner}`);
  return {
    dashboard: dashboard[1]!,
    password: dashboard[2]!,
    database: database[1]!,
    async stop() {
      child.kill('SIGINT');
      return { code: await exited, output };
    },
  };
}

async function authorised(started: Started, password: string): Promise<number> {
  const response = await fetch(`${started.dashboard}consumers`, {
    headers: { authorization: `Basic ${Buffer.from(`ops:${password}`).toString('base64')}` },
  });
  await response.body?.cancel();
  return response.status;
}

/** A data folder removed after the test, with the cluster it may link to outside it. */
async function dataFolder(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'sluice-demo-data-'));
  onTestFinished(async () => {
    const link = join(dir, 'postgres', 'cluster');
    if ((await lstat(link).catch(() => undefined))?.isSymbolicLink()) {
      await rm(resolve(join(dir, 'postgres'), await readlink(link)), { recursive: true, force: true });
    }
    await rm(dir, { recursive: true, force: true });
  });
  return dir;
}

test(
  'restarted on the same data folder, the demo keeps its dashboard URL, password and database URL',
  { timeout: 240_000 },
  async () => {
    const dataDir = await dataFolder();
    const first = await start(dataDir);
    expect(await authorised(first, first.password)).toBe(200);
    expect(await authorised(first, `${first.password}x`)).toBe(401);
    const firstStop = await first.stop();
    expect(firstStop.code, firstStop.output).toBe(0);

    const state = join(dataDir, 'demo.json');
    expect((await stat(state)).mode & 0o777).toBe(0o600);
    const kept = JSON.parse(await readFile(state, 'utf8')) as Record<string, unknown>;
    expect(kept).toEqual({
      opsPassword: first.password,
      httpPort: Number(new URL(first.dashboard).port),
      postgresPort: Number(new URL(first.database).port),
    });

    for (let restart = 0; restart < 2; restart++) {
      const again = await start(dataDir);
      expect({ dashboard: again.dashboard, password: again.password, database: again.database }).toEqual({
        dashboard: first.dashboard,
        password: first.password,
        database: first.database,
      });
      expect(await authorised(again, first.password)).toBe(200);
      const stopped = await again.stop();
      expect(stopped.code, stopped.output).toBe(0);
    }

    // A fresh data folder is a new demo: a new password.
    const fresh = await start(await dataFolder());
    expect(fresh.password).not.toBe(first.password);
    expect((await fresh.stop()).code).toBe(0);
  },
);

import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, onTestFinished, test } from 'vitest';
import {
  chooseHttpPort,
  choosePostgresPort,
  keepablePort,
  DEFAULT_HTTP_PORT,
  DemoSetupError,
  loadDemoState,
  saveDemoState,
  stateFile,
} from './demo-state.js';

async function folder(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'sluice-demo-state-'));
  onTestFinished(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/**
 * Whether `port` lies outside the range this machine hands out for outgoing connections: a port the
 * demo keeps must not be one an unrelated connection can take between two starts. Where that range
 * leaves no room below it (it starts below 11000), any port will do.
 */
async function outsideEphemeral(port: number): Promise<boolean> {
  const range = await readFile('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').catch(() => '32768 60999');
  const [low, high] = range.trim().split(/\s+/).map(Number) as [number, number];
  if (low < 11_000) return port > 0;
  return port > 0 && (port < low || port > high);
}

/** Listens on `port` (0: any) of 127.0.0.1 until the test ends; undefined when it is taken. */
async function occupy(port: number): Promise<number | undefined> {
  const server: Server = createServer();
  const bound = await new Promise<boolean>((done) => {
    server.once('error', () => {
      done(false);
    });
    server.listen({ port, host: '127.0.0.1', exclusive: true }, () => {
      done(true);
    });
  });
  if (!bound) return undefined;
  onTestFinished(
    () =>
      new Promise<void>((done) => {
        server.close(() => {
          done();
        });
      }),
  );
  const address = server.address();
  return typeof address === 'object' && address ? address.port : undefined;
}

test('a data folder without state gets a new random password each time; saved, it is kept (mode 0600)', async () => {
  const dir = await folder();
  const a = await loadDemoState(dir);
  const b = await loadDemoState(dir);
  expect(a.opsPassword).toMatch(/^[\w-]{12}$/);
  expect(b.opsPassword).not.toBe(a.opsPassword);
  await saveDemoState(join(dir, 'nested'), { ...a, httpPort: 3001, postgresPort: 5433 });
  expect(await loadDemoState(join(dir, 'nested'))).toEqual({ ...a, httpPort: 3001, postgresPort: 5433 });
  expect((await stat(stateFile(join(dir, 'nested')))).mode & 0o777).toBe(0o600);
  // A file made readable by others is narrowed back when the state is saved again.
  await writeFile(stateFile(dir), '{}', { mode: 0o644 });
  await saveDemoState(dir, a);
  expect((await stat(stateFile(dir))).mode & 0o777).toBe(0o600);
  expect(JSON.parse(await readFile(stateFile(dir), 'utf8'))).toEqual({ opsPassword: a.opsPassword });
});

test('a state file the demo did not write stops the start with one line saying what to do', async () => {
  const dir = await folder();
  const file = stateFile(dir);
  for (const [content, problem] of [
    ['not json', 'is not valid JSON'],
    ['[1]', 'is not a JSON object'],
    ['{"opsPassword":"short"}', 'has no opsPassword of at least 12 characters'],
    ['{"opsPassword":"long-enough-password","httpPort":70000}', 'has an invalid httpPort'],
    ['{"opsPassword":"long-enough-password","postgresPort":"5432"}', 'has an invalid postgresPort'],
  ] as const) {
    await writeFile(file, content);
    const error = await loadDemoState(dir).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DemoSetupError);
    expect((error as Error).message).toBe(
      `${file} ${problem}: remove it (the next start chooses a new password and ports)`,
    );
  }
});

test('the HTTP port: PORT wins and is not kept; otherwise the kept port, else one chosen and kept', async () => {
  const state = { opsPassword: 'long-enough-password' };
  expect(await chooseHttpPort('4321', { ...state, httpPort: 4000 }, '127.0.0.1')).toEqual({
    port: 4321,
    keep: false,
  });
  for (const env of [undefined, '', '0']) {
    expect(await chooseHttpPort(env, { ...state, httpPort: 4000 }, '127.0.0.1')).toEqual({
      port: 4000,
      keep: true,
    });
  }
  const random = await chooseHttpPort('0', state, '127.0.0.1');
  expect(random.keep).toBe(true);
  expect(await outsideEphemeral(random.port)).toBe(true);
  await expect(chooseHttpPort('http', state, '127.0.0.1')).rejects.toThrow(
    new DemoSetupError('PORT=http is not a port number (0–65535)'),
  );

  // PORT unset on a first start: 3000, or another free port when 3000 is taken (here by us or by
  // whatever already listens there), said in a notice.
  await occupy(DEFAULT_HTTP_PORT);
  const moved = await chooseHttpPort(undefined, state, '127.0.0.1');
  expect(moved.port).not.toBe(DEFAULT_HTTP_PORT);
  expect(await outsideEphemeral(moved.port)).toBe(true);
  expect(moved).toEqual({
    port: moved.port,
    keep: true,
    notice: `port ${DEFAULT_HTTP_PORT} is in use: the demo takes port ${moved.port}`,
  });
});

test("PostgreSQL's kept port is reused while it is free, and given up with a notice when it is not", async () => {
  const state = { opsPassword: 'long-enough-password' };
  expect(await choosePostgresPort(state)).toEqual({ port: undefined });
  const taken = await occupy(0);
  expect(taken).toBeDefined();
  expect(await choosePostgresPort({ ...state, postgresPort: taken! })).toEqual({
    port: undefined,
    notice: `PostgreSQL's port ${taken} is in use by something else: it moves to another port`,
  });
  const free = await new Promise<number>((done) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const port = (server.address() as { port: number }).port;
      server.close(() => {
        done(port);
      });
    });
  });
  expect(await choosePostgresPort({ ...state, postgresPort: free })).toEqual({ port: free });
});

test('a port the demo keeps is picked below the range of ports for outgoing connections', async () => {
  for (let i = 0; i < 20; i++) {
    const port = await keepablePort('127.0.0.1');
    expect(await outsideEphemeral(port), String(port)).toBe(true);
  }
});

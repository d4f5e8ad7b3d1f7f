import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import postgres from 'postgres';
import { expect, onTestFinished, test } from 'vitest';
import { isAlive } from '../processes.js';
import { embeddedServer } from './embedded.js';

async function until(condition: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

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

// The chaos run's own PostgreSQL cluster: durable settings, a persistent data folder and a fixed
// port, so it can be crashed (SIGQUIT to the postmaster: an immediate shutdown, WAL recovery on the
// next start) and started again where the clients expect it.
import { chmod, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { embeddedServer, type EmbeddedServer } from '@sluice/testing';
import { freePort, isAlive } from '@sluice/testing/processes';
import postgres from 'postgres';
import { now } from './clock.js';

export const CHAOS_SETTINGS: Readonly<Record<string, string>> = {
  fsync: 'on',
  synchronous_commit: 'on',
  full_page_writes: 'on',
  max_connections: '200',
};

export interface ImmediateRestart {
  /** SIGQUIT sent to the postmaster. */
  readonly quitAt: number;
  /** The postmaster has exited. */
  readonly downAt: number;
  /** A fresh connection's `select 1` answered. */
  readonly acceptAt: number;
}

export interface ChaosCluster {
  readonly url: string;
  readonly port: number;
  readonly postgresVersion: string;
  /** Immediate shutdown, `pauseMs` down, start again on the same data folder and port. */
  restartImmediately(pauseMs: number): Promise<ImmediateRestart>;
  stop(): Promise<void>;
}

/** Waits until a fresh connection answers; returns when it did. */
async function waitAccepting(url: string, timeoutMs: number): Promise<number> {
  const deadline = now() + timeoutMs;
  for (;;) {
    const probe = postgres(url, { max: 1, connect_timeout: 2, onnotice: () => undefined });
    try {
      await probe`select 1`;
      return now();
    } catch (error) {
      if (now() > deadline) throw error;
    } finally {
      await probe.end({ timeout: 1 });
    }
    await delay(25);
  }
}

/** Starts a cluster in `<root>/pg` (root must exist; it is made traversable for the postgres user). */
export async function startChaosCluster(root: string): Promise<ChaosCluster> {
  const dataDir = join(root, 'pg');
  await mkdir(dataDir, { recursive: true });
  // Under root the server runs as the postgres OS user, which must reach <root>/pg/cluster.
  await chmod(root, 0o755);
  await chmod(dataDir, 0o755);
  const port = await freePort();
  let server: EmbeddedServer = await embeddedServer({ dataDir, port, settings: CHAOS_SETTINGS });
  const url = server.url;
  const admin = postgres(url, { max: 1, onnotice: () => undefined });
  const [{ version } = { version: '?' }] = await admin<
    { version: string }[]
  >`select current_setting('server_version') as version`;
  await admin.end();
  return {
    url,
    port,
    postgresVersion: version,
    async restartImmediately(pauseMs) {
      const pid = server.postmasterPid;
      process.kill(pid, 'SIGQUIT');
      const quitAt = now();
      while (isAlive(pid)) await delay(10);
      const downAt = now();
      await server.stop();
      await delay(pauseMs);
      server = await embeddedServer({ dataDir, port, settings: CHAOS_SETTINGS });
      const acceptAt = await waitAccepting(url, 60_000);
      return { quitAt, downAt, acceptAt };
    },
    stop: () => server.stop(),
  };
}

// Regression tests for the postgres.js patch (patches/postgres@3.4.9.patch). Sluice's dispatcher,
// its writers and operators all run on postgres.js; a connection that the server drops while a
// small write sits in the driver's write buffer must neither crash the process nor stay poisoned.
import net from 'node:net';
import { useTestDatabase } from '@sluice/testing/vitest';
import postgres from 'postgres';
import { expect, onTestFinished, test } from 'vitest';

const db = await useTestDatabase();

/**
 * A pool whose sockets the test can reach. `beforeClose` runs on a socket's 'close' before the
 * driver's own handler.
 */
function poolWithSockets(max: number, beforeClose: () => void = () => undefined) {
  const url = new URL(db.url);
  const sockets: net.Socket[] = [];
  // `socket` (a socket factory) is a postgres.js option its type definitions leave out.
  const options = {
    max,
    connect_timeout: 3,
    onnotice: () => undefined,
    socket: () => {
      const socket = net.connect({ host: url.hostname, port: Number(url.port || 5432) });
      socket.once('close', beforeClose);
      sockets.push(socket);
      return socket;
    },
  };
  const sql = postgres(db.url, options as postgres.Options<Record<string, never>>);
  onTestFinished(() => sql.end({ timeout: 1 }));
  return { sql, sockets };
}

test('when every connection drops at once, a query issued between their closes fails and the pool recovers', async () => {
  // A server restart or a backend-kill storm closes several sockets in one phase of the event loop.
  // A caller reacting to the first close (here: the first socket's 'close') issues a query; it goes
  // to a connection whose socket is closing too and is buffered for the next loop turn, but that
  // socket's close runs first.
  let stranded: Promise<string> | undefined;
  const { sql, sockets } = poolWithSockets(2, () => {
    stranded ??= sql`select ${2}::int as x`.execute().then(
      () => 'settled',
      (error: unknown) => codeOf(error),
    );
  });
  await Promise.all([sql`select pg_sleep(0.05)`, sql`select pg_sleep(0.05)`]);
  expect(sockets.length).toBe(2);
  for (const socket of sockets) socket.destroy();
  await until(() => stranded !== undefined);
  expect(await stranded).toBe('CONNECTION_CLOSED');

  // Unpatched 3.4.9 keeps that connection's cancelled flush timer and its buffered bytes: the next
  // startup message on it is never sent, and every reconnect ends in CONNECT_TIMEOUT.
  const started = Date.now();
  const rows = await Promise.all(
    [3, 4].map((x) => sql<{ x: number }[]>`select ${x}::int as x, pg_sleep(0.05)`),
  );
  expect(rows.map(([row]) => row?.x)).toEqual([3, 4]);
  expect(Date.now() - started).toBeLessThan(2_000);
});

function codeOf(error: unknown): string {
  const { code, message } = error as { code?: string; message?: string };
  return code ?? message ?? String(error);
}

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 5));
}

test('a write scheduled for a socket that closed rejects its query instead of throwing from a timer', async () => {
  const { sql, sockets } = poolWithSockets(1);
  await sql`select 1`;
  const reserved = await sql.reserve();
  onTestFinished(() => {
    reserved.release();
  });
  const socket = sockets.at(-1) as net.Socket;
  socket.destroy();
  await new Promise((resolve) => socket.once('close', resolve));
  // The reserved connection has no socket now; a query on it must reject, not kill the process.
  const code = await reserved`select 1`.then(
    () => 'settled',
    (error: unknown) => codeOf(error),
  );
  expect(code).toMatch(/CONNECTION_(CLOSED|DESTROYED)/);
});

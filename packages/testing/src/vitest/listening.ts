import type { Server, Socket } from 'node:net';
import { onTestFinished } from 'vitest';

/** A server of the test's own on 127.0.0.1: its port, and how many connections it accepted. */
export interface Listening {
  readonly port: number;
  connections(): number;
}

/**
 * Starts `server` (a `net` or `http` server) on a free port of 127.0.0.1, closed with every
 * connection it holds when the test ends: a peer that is not PostgreSQL, for connection tests
 * (an HTTP server answers something else; a `net` server that ignores its sockets never answers).
 */
export async function listening(server: Server): Promise<Listening> {
  let connections = 0;
  const sockets = new Set<Socket>();
  server.on('connection', (socket: Socket) => {
    connections++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  onTestFinished(
    () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => {
          resolve();
        });
      }),
  );
  const address = server.address();
  if (typeof address !== 'object' || address === null) throw new Error('the server has no address');
  return { port: address.port, connections: () => connections };
}

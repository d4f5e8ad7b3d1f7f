import type { PostgresServer } from './provider.js';

/** PostgreSQL in a container via testcontainers; its Ryuk sidecar removes the container if we die. */
export async function containerServer(image = 'postgres:17-alpine'): Promise<PostgresServer> {
  const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
  const container = await new PostgreSqlContainer(image)
    .withCommand([
      'postgres',
      '-c',
      'fsync=off',
      '-c',
      'max_connections=300',
      '-c',
      'max_prepared_transactions=20',
    ])
    .start();
  let stopped: Promise<void> | undefined;
  return {
    url: container.getConnectionUri(),
    source: 'container',
    stop: () => (stopped ??= container.stop().then(() => undefined)),
  };
}

import type { PostgresServer } from './provider.js';

/**
 * PostgreSQL in a container via testcontainers; its Ryuk sidecar removes the container if we die.
 * `@testcontainers/postgresql` is an optional peer dependency, imported only here.
 * @throws when it is not installed, saying so
 */
export async function containerServer(image = 'postgres:17-alpine'): Promise<PostgresServer> {
  const { PostgreSqlContainer } = await import('@testcontainers/postgresql').catch((error: unknown) => {
    throw (error as NodeJS.ErrnoException).code === 'ERR_MODULE_NOT_FOUND'
      ? new Error('@testcontainers/postgresql is not installed (npm i -D @testcontainers/postgresql)', {
          cause: error,
        })
      : error;
  });
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

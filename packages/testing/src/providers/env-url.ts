import type { PostgresServer } from './provider.js';

/** The server named by DATABASE_URL: used as is, never stopped. */
export function envUrlServer(url: string): PostgresServer {
  return { url, source: 'env', stop: () => Promise.resolve() };
}

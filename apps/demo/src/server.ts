// `pnpm start`: the demo shop on an embedded PostgreSQL (kept in .data/ at the repo root and reused
// on the next start), or on DATABASE_URL when it is set.
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { checkConnection, ConnectTimeoutError, type Sql } from '@sluice/core';
import { embeddedServer, EmbeddedServerError, type EmbeddedServer } from '@sluice/testing';
import postgres from 'postgres';
import { buildApp, OPS_PREFIX } from './app.js';

const DATA_DIR = new URL('../../../.data/postgres/', import.meta.url).pathname;
/** Where `pnpm demo:load` sends its orders without --url or DEMO_URL. */
const DEFAULT_BASE = 'http://127.0.0.1:3000';

/** A failure the user can act on: said in one line, without a stack trace. */
class StartError extends Error {}

async function main(): Promise<void> {
  const started = Date.now();
  const port = Number(process.env['PORT'] ?? 3000);
  const host = process.env['HOST'] ?? '127.0.0.1';
  let server: EmbeddedServer | undefined;
  let url = process.env['DATABASE_URL'];
  if (!url) {
    console.log(`Starting embedded PostgreSQL (data in ${DATA_DIR}) …`);
    server = await embeddedServer({ dataDir: DATA_DIR, settings: { fsync: 'on', full_page_writes: 'on' } });
    url = server.url;
  }
  // connect_timeout: a DATABASE_URL that points at the wrong port fails after 10 s, not 30.
  const sql = postgres(url, { max: 20, connect_timeout: 10, onnotice: () => undefined }) as unknown as Sql;
  const giveUp = async (error: unknown): Promise<never> => {
    await sql.end({ timeout: 0 }).catch(() => undefined);
    await server?.stop();
    throw error;
  };
  // A DATABASE_URL pointing at a port where something else answers would otherwise hang here.
  await checkConnection(sql).catch(giveUp);
  const opsPassword = process.env['DEMO_OPS_PASSWORD'] ?? randomBytes(9).toString('base64url');
  const { app } = await buildApp({
    sql,
    instanceId: `${hostname()}:${port}`,
    bounce: new RegExp(process.env['DEMO_BOUNCE'] ?? '^bounce', 'i'),
    opsPassword,
    traces: process.env['DEMO_TRACES'] === 'console',
    logger: process.env['DEMO_LOG'] === '1',
  }).catch(giveUp);

  // Ctrl+C reaches every process of the terminal's foreground group: pnpm, tsx and this one, but
  // not PostgreSQL, which the embedded provider starts in a session of its own. So the order is
  // ours: the running handlers finish (app.close() stops the dispatcher), the app says it stopped,
  // and only then does PostgreSQL stop. `pnpm start` execs tsx (no shell in between), so pnpm
  // exits with this process's code: 0.
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    console.log(`\n${signal}: stopping (waiting for running handlers) …`);
    await app.close();
    await sql.end({ timeout: 5 });
    console.log('Sluice demo shop stopped.');
    if (server) {
      await server.stop();
      console.log('PostgreSQL stopped.');
    }
    process.exit(0);
  };
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGTERM', () => void stop('SIGTERM'));

  try {
    await app.listen({ port, host });
  } catch (error) {
    await app.close();
    await giveUp(
      (error as NodeJS.ErrnoException).code === 'EADDRINUSE'
        ? new StartError(
            `port ${port} on ${host} is in use: stop what listens there, or set PORT to another port`,
          )
        : error,
    );
  }
  const base = `http://${host}:${port}`;
  console.log(`
Sluice demo shop is running (${Date.now() - started} ms)

  Shop            ${base}/
  Ops dashboard   ${base}${OPS_PREFIX}/   user: ops   password: ${opsPassword}
  Stats           ${base}/stats
  Live feed (SSE) ${base}/feed
  Metrics         ${base}/metrics
  Database        ${server ? `${url}  (cluster in ${server.dataDir})` : '(DATABASE_URL)'}

Try it:
  curl -s -X POST ${base}/orders -H 'content-type: application/json' \\
    -d '{"customer":"ada@example.com","items":[{"sku":"TEA-1","quantity":2,"priceCents":450}]}'
  pnpm demo:load --rate 20 --duration 60${base === DEFAULT_BASE ? '' : ` --url ${base}`}
      some customers' addresses do not exist: those mails end in the mailer's dead letters
  curl -s -X POST ${base}/demo/poison
      a malformed event: order-stats turns dead (Diagnose, then Skip on the dashboard)

Ctrl+C stops the server and PostgreSQL.`);
}

main().catch((error: unknown) => {
  // What the user can fix is said in one line; anything else is a bug: the whole error, stack included.
  if (
    error instanceof EmbeddedServerError ||
    error instanceof ConnectTimeoutError ||
    error instanceof StartError
  ) {
    console.error(`sluice demo: ${error.message}`);
  } else {
    console.error(error);
  }
  process.exit(1);
});

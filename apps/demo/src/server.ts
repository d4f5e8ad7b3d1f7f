// `pnpm start`: the demo shop on an embedded PostgreSQL (kept in .data/ at the repo root and reused
// on the next start), or on DATABASE_URL when it is set. The ops password and the ports it chose
// are kept in .data/demo.json, so a restart on the same .data serves the same URLs and password.
import { fileURLToPath } from 'node:url';
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import { checkConnection, ConnectTimeoutError, type Sql } from '@sluice/core';
import { embeddedServer, EmbeddedServerError, type EmbeddedServer } from '@sluice/testing';
import postgres from 'postgres';
import { buildApp, OPS_PREFIX } from './app.js';
import {
  chooseHttpPort,
  choosePostgresPort,
  DemoSetupError,
  keepablePort,
  loadDemoState,
  saveDemoState,
  stateFile,
} from './demo-state.js';

const DEFAULT_DATA_DIR = fileURLToPath(new URL('../../../.data/', import.meta.url));
/** Where `pnpm demo:load` sends its orders without --url or DEMO_URL. */
const DEFAULT_BASE = 'http://127.0.0.1:3000';

/** A failure the user can act on: said in one line, without a stack trace. */
class StartError extends Error {}

async function main(): Promise<void> {
  const started = Date.now();
  const dataDir = resolve(process.env['DEMO_DATA_DIR'] || DEFAULT_DATA_DIR);
  const state = await loadDemoState(dataDir);
  const opsPassword = process.env['DEMO_OPS_PASSWORD'] ?? state.opsPassword;
  if (opsPassword.length < 12) throw new DemoSetupError('DEMO_OPS_PASSWORD must have at least 12 characters');
  const host = process.env['HOST'] ?? '127.0.0.1';
  const http = await chooseHttpPort(process.env['PORT'], state, host);
  if (http.notice) console.log(http.notice);
  const port = http.port;
  let server: EmbeddedServer | undefined;
  let url = process.env['DATABASE_URL'];
  if (!url) {
    const postgresDir = join(dataDir, 'postgres');
    const kept = await choosePostgresPort(state);
    if (kept.notice) console.log(kept.notice);
    console.log(`Starting embedded PostgreSQL (data in ${postgresDir}/) …`);
    server = await embeddedServer({
      dataDir: postgresDir,
      ...(kept.port === undefined ? { choosePort: () => keepablePort('127.0.0.1') } : { port: kept.port }),
      settings: { fsync: 'on', full_page_writes: 'on' },
    });
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
  const { app } = await buildApp({
    sql,
    instanceId: `${hostname()}:${port}`,
    bounce: new RegExp(process.env['DEMO_BOUNCE'] ?? '^bounce', 'i'),
    opsPassword,
    traces: process.env['DEMO_TRACES'] === 'console',
    logger: process.env['DEMO_LOG'] === '1',
    orderStatsV2: process.env['DEMO_ORDER_STATS_V2'] === '1',
  }).catch(giveUp);

  // Ctrl+C reaches every process of the terminal's foreground group: pnpm and this one, but not
  // PostgreSQL, which the embedded provider starts in a session of its own. So the order is ours:
  // the running handlers finish (app.close() stops the dispatcher), the app says it stopped, and
  // only then does PostgreSQL stop. `pnpm start` execs node with tsx as a loader (no shell and no
  // tsx CLI in between: the CLI relays a signal to its child, and when the child's acknowledgement
  // misses two 30 ms windows it kills the child and exits 130; a CI run ended Ctrl+C with 130
  // under it), so pnpm exits with this process's code: 0.
  let stopping = false;
  const stop = async (signal: string) => {
    // pnpm passes a Ctrl+C on to this process, which the terminal sent it too: one stop.
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
    const keptSince =
      http.keep && state.httpPort === port ? ` (kept in ${stateFile(dataDir)} since the first start)` : '';
    await giveUp(
      (error as NodeJS.ErrnoException).code === 'EADDRINUSE'
        ? new StartError(
            `port ${port} on ${host}${keptSince} is in use: stop what listens there, or set PORT to another port`,
          )
        : error,
    );
  }
  // Kept for the next start on this data folder: the password, and the ports the demo chose itself.
  await saveDemoState(dataDir, {
    opsPassword: state.opsPassword,
    ...(http.keep ? { httpPort: port } : state.httpPort === undefined ? {} : { httpPort: state.httpPort }),
    ...(server
      ? { postgresPort: Number(new URL(server.url).port) }
      : state.postgresPort === undefined
        ? {}
        : { postgresPort: state.postgresPort }),
  }).catch(giveUp);
  const base = `http://${host}:${port}`;
  console.log(`
Sluice demo shop is running (${Date.now() - started} ms)

  Shop            ${base}/
  Ops dashboard   ${base}${OPS_PREFIX}/   user: ops   password: ${opsPassword}${opsPassword === state.opsPassword ? `  (kept in ${stateFile(dataDir)})` : ''}
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
    error instanceof StartError ||
    error instanceof DemoSetupError
  ) {
    console.error(`sluice demo: ${error.message}`);
  } else {
    console.error(error);
  }
  process.exit(1);
});

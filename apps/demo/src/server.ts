// `pnpm start`: the demo shop on an embedded PostgreSQL (kept in .data/ at the repo root and reused
// on the next start), or on DATABASE_URL when it is set.
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { embeddedServer, type PostgresServer } from '@sluice/testing';
import postgres from 'postgres';
import type { Sql } from '@sluice/core';
import { buildApp, OPS_PREFIX } from './app.js';

const DATA_DIR = new URL('../../../.data/postgres/', import.meta.url).pathname;

async function main(): Promise<void> {
  const started = Date.now();
  const port = Number(process.env['PORT'] ?? 3000);
  const host = process.env['HOST'] ?? '127.0.0.1';
  let server: PostgresServer | undefined;
  let url = process.env['DATABASE_URL'];
  if (!url) {
    console.log(`Starting embedded PostgreSQL (data in ${DATA_DIR}) …`);
    server = await embeddedServer({ dataDir: DATA_DIR, settings: { fsync: 'on', full_page_writes: 'on' } });
    url = server.url;
  }
  const sql = postgres(url, { max: 20, onnotice: () => undefined }) as unknown as Sql;
  const opsPassword = process.env['DEMO_OPS_PASSWORD'] ?? randomBytes(9).toString('base64url');
  const { app } = await buildApp({
    sql,
    instanceId: `${hostname()}:${port}`,
    bounce: new RegExp(process.env['DEMO_BOUNCE'] ?? '^bounce', 'i'),
    opsPassword,
    traces: process.env['DEMO_TRACES'] === 'console',
    logger: process.env['DEMO_LOG'] === '1',
  });

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    console.log(`\n${signal}: stopping (waiting for running handlers) …`);
    await app.close();
    await sql.end({ timeout: 5 });
    await server?.stop();
    console.log('Stopped.');
    process.exit(0);
  };
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGTERM', () => void stop('SIGTERM'));

  await app.listen({ port, host });
  const base = `http://${host}:${port}`;
  console.log(`
Sluice demo shop is running (${Date.now() - started} ms)

  Shop            ${base}/
  Ops dashboard   ${base}${OPS_PREFIX}/   user: ops   password: ${opsPassword}
  Stats           ${base}/stats
  Live feed (SSE) ${base}/feed
  Metrics         ${base}/metrics
  Database        ${server ? url : '(DATABASE_URL)'}

Try it:
  curl -s -X POST ${base}/orders -H 'content-type: application/json' \\
    -d '{"customer":"ada@example.com","items":[{"sku":"TEA-1","quantity":2,"priceCents":450}]}'
  pnpm demo:load --rate 20 --duration 30     (some customers bounce: watch the mailer die, then skip)

Ctrl+C stops the server and PostgreSQL.`);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});

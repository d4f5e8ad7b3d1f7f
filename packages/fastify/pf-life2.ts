import Fastify from 'fastify';
import sluice from '@sluice/fastify';
import postgres from 'postgres';
import { pool, freshSchema, sleep, log, URL } from './pf-lib.ts';
const schema = 'pf_life2';
await freshSchema(schema);
const sql = pool();
const consumers = [{ name: 'c', handler: async () => {} }];
async function conns() { const r = await sql`select count(*)::int n from pg_stat_activity where application_name like 'sluice%'`; return r[0].n; }

// A: close before ready
{
  const app = Fastify();
  await app.register(sluice, { sql, schema, consumers });
  const t = Date.now();
  try { await app.close(); log('A close-before-ready ok', Date.now() - t, 'ms'); } catch (e) { log('A close-before-ready threw', (e as Error).message); }
  await sleep(200);
  log('A conns after', await conns());
  try { await app.ready(); log('A ready after close: resolved; dispatcher running?', (app.sluice.dispatcher as any).running ?? '?'); } catch (e) { log('A ready after close threw', (e as any).code, (e as Error).message); }
  await sleep(300); log('A conns after ready-after-close', await conns());
  try { await app.close(); } catch {}
}
// B: register twice
{
  const app = Fastify();
  try {
    await app.register(sluice, { sql, schema, consumers });
    await app.register(sluice, { sql, schema, consumers });
    await app.ready();
    log('B register twice: ready ok');
  } catch (e) { log('B register twice threw', (e as any).code, (e as Error).message); }
  try { await app.close(); } catch (e) { log('B close threw', (e as Error).message); }
  await sleep(300);
  log('B conns after', await conns());
}
// C: close while ready in progress
{
  const app = Fastify();
  await app.register(sluice, { sql, schema, consumers });
  const r = app.ready();
  const c = app.close();
  const res = await Promise.allSettled([r, c]);
  log('C ready+close concurrently', res.map((x) => x.status + (x.status === 'rejected' ? ':' + (x.reason as Error).message : '')).join(' | '));
  await sleep(500);
  log('C conns after', await conns());
}
// D: onReady fails (bad port) then close
{
  const bad = postgres('postgres://postgres:pw@127.0.0.1:1/postgres', { connect_timeout: 2, onnotice: () => {} });
  const app = Fastify();
  await app.register(sluice, { sql: bad, schema, consumers });
  try { await app.ready(); log('D ready ok?!'); } catch (e) { log('D ready threw', (e as any).code, (e as Error).message.slice(0, 200)); }
  const t = Date.now();
  try { await app.close(); log('D close ok', Date.now() - t); } catch (e) { log('D close threw', (e as Error).message); }
  await bad.end();
}
await sql.end();

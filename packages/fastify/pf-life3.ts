import Fastify from 'fastify';
import sluice from '@sluice/fastify';
import { pool, freshSchema, sleep, log } from './pf-lib.ts';
const schema = 'pf_life3';
const sql = pool();
async function conns() { const r = await sql`select application_name, state from pg_stat_activity where application_name like 'sluice%'`; return r.length + ' ' + r.map((x) => x.application_name).join(','); }
// baseline: plugin with slow onReady
{
  const app = Fastify();
  let closedDuringReady = false, inReady = false;
  app.addHook('onReady', async () => { inReady = true; await sleep(300); inReady = false; });
  app.addHook('onClose', async () => { if (inReady) closedDuringReady = true; });
  const r = app.ready(); await sleep(50); const c = app.close();
  const res = await Promise.allSettled([r, c]);
  log('baseline', res.map((x) => x.status).join(','), 'onClose ran during onReady:', closedDuringReady);
}
for (const delay of [0, 20, 60, 150, 400]) {
  await freshSchema(schema);
  const app = Fastify();
  let handled = 0;
  await app.register(sluice, { sql, schema, consumers: [{ name: 'c', handler: async () => { handled++; } }] });
  const r = app.ready(); await sleep(delay); const c = app.close();
  const res = await Promise.allSettled([r, c]);
  log(`delay ${delay}:`, res.map((x) => x.status + (x.status === 'rejected' ? ':' + ((x.reason as any).code ?? '') + ' ' + (x.reason as Error).message.slice(0, 120) : '')).join(' | '));
  await sleep(800);
  log('   conns after', await conns());
}
await sql.end();

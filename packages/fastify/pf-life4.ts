import Fastify from 'fastify';
import sluice from '@sluice/fastify';
import { pool, freshSchema, sleep, log } from './pf-lib.ts';
const schema = 'pf_life4';
const sql = pool();
async function conns() { const r = await sql`select application_name, state, pid from pg_stat_activity where application_name like 'sluice%'`; return r.length + ' ' + r.map((x) => x.application_name + '/' + x.state).join(','); }
await freshSchema(schema);
const mode = process.argv[2] ?? 'migrated';
if (mode === 'migrated') { const a = Fastify(); await a.register(sluice, { sql, schema, consumers: [{ name: 'c', handler: async () => {} }] }); await a.ready(); await a.close(); }
for (const delay of [0, 0, 10, 30, 100, 150, 200]) {
  const app = Fastify();
  await app.register(sluice, { sql, schema, consumers: [{ name: 'c', handler: async () => {} }] });
  const t = Date.now();
  const r = app.ready(); await sleep(delay); const c = app.close();
  const res = await Promise.allSettled([r, c]);
  log(`delay ${delay} (${Date.now() - t}ms):`, res.map((x) => x.status + (x.status === 'rejected' ? ':' + ((x.reason as any).code ?? '') + ' ' + (x.reason as Error).message.slice(0, 120) : '')).join(' | '));
  await sleep(300); log('   conns +300ms', await conns());
  await sleep(3000); log('   conns +3.3s', await conns());
}
await sql.end();

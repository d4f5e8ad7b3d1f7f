import Fastify from 'fastify';
import sluice from '@sluice/fastify';
import { pool, freshSchema, sleep, log } from './pf-lib.ts';
const schema = 'pf_life5';
await freshSchema(schema);
const sql = pool();
const consumers = [{ name: 'c', handler: async () => {} }];
const steps = process.argv.slice(2);
for (const s of steps) {
  if (s === 'A') {
    const app = Fastify();
    await app.register(sluice, { sql, schema, consumers });
    await app.close(); log('A closed before ready');
    const r = await Promise.allSettled([app.ready()]); log('A ready after close', r[0].status);
  }
  if (s === 'B') {
    const app = Fastify();
    try { await app.register(sluice, { sql, schema, consumers }); await app.register(sluice, { sql, schema, consumers }); } catch (e) { log('B', (e as any).code); }
    const r = await Promise.allSettled([app.close()]); log('B close', r[0].status, (r[0] as any).reason?.code ?? '');
  }
  if (s === 'C') {
    const app = Fastify();
    await app.register(sluice, { sql, schema, consumers });
    const res = await Promise.allSettled([app.ready(), app.close()]);
    log('C', res.map((x) => x.status + (x.status === 'rejected' ? ':' + (x.reason as Error).message : '')).join(' | '));
  }
  if (s === 'R') { // plain ready+close
    const app = Fastify();
    await app.register(sluice, { sql, schema, consumers });
    await app.ready(); await app.close(); log('R ok');
  }
}
await sql.end();

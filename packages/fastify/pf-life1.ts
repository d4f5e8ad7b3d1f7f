import Fastify from 'fastify';
import sluice from '@sluice/fastify';
import { pool, freshSchema, sleep, log } from './pf-lib.ts';
const schema = 'pf_life1';
await freshSchema(schema);
const sql = pool();
const seen: string[] = [];
let inHandler = 0, finished = 0;
const app = Fastify();
await app.register(sluice, {
  sql, schema, pollIntervalMs: 50,
  consumers: [{ name: 'slow', handler: async (e) => { inHandler++; seen.push(e.type); await sleep(1500); finished++; } }],
});
await app.ready();
log('ready');
await app.sluice.transaction(async (tx) => { await app.sluice.append(tx, [{ streamId: 's1', type: 'A', data: {} }]); });
await sleep(300);
log('inHandler before close', inHandler, 'finished', finished);
const t0 = Date.now();
await app.close();
log('close took', Date.now() - t0, 'ms; finished', finished);
// close twice
const t1 = Date.now();
try { await app.close(); log('second close ok', Date.now() - t1); } catch (e) { log('second close threw', (e as Error).message); }
// cursor after close
const [row] = await sql.unsafe(`select * from ${schema}.consumers`);
log('row', JSON.stringify(row, (_k, v) => typeof v === 'bigint' ? v.toString() : v));
const act = await sql`select application_name, state from pg_stat_activity where application_name like 'sluice%'`;
log('sluice connections after close', act.length, JSON.stringify(act));
await sql.end();

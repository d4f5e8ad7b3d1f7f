import Fastify from 'fastify';
import sluice, { bearerAuth } from '@sluice/fastify';
import { pool, freshSchema, sleep, log, TOKEN } from './pf-lib.ts';
const schema = 'pf_http1';
await freshSchema(schema);
const sql = pool();
const app = Fastify();
await app.register(sluice, {
  sql, schema, pollIntervalMs: 50, retryDelayMs: 10,
  consumers: [
    { name: 'poison', errorPolicy: { maxAttempts: 1 }, handler: async (e) => { if (e.type === 'Bad') throw new Error('bad event'); } },
    { name: 'ok', handler: async () => {} },
  ],
  ops: { auth: bearerAuth(TOKEN) },
});
await app.ready();
await app.sluice.transaction(async (tx) => { await app.sluice.append(tx, [{ streamId: 's', type: 'Good', data: { a: 1 } }, { streamId: 's', type: 'Bad', data: { secret: 'x' } }]); });
await sleep(1500);
const auth = { authorization: `Bearer ${TOKEN}` };
async function audits() { const r = await sql.unsafe(`select count(*)::int n from ${schema}.audit`); return r[0].n; }
async function state() { const r = await sql.unsafe(`select name, status, cursor::text, stuck_event_id::text, disabled_until from ${schema}.consumers order by name`); return JSON.stringify(r); }
type Req = { m: string; u: string; h?: Record<string, string>; b?: string; note?: string };
const J = { 'content-type': 'application/json' };
const reqs: Req[] = [
  { m: 'GET', u: '/sluice/consumers', note: 'no auth' },
  { m: 'GET', u: '/sluice/consumers', h: { authorization: 'Bearer wrong' } },
  { m: 'GET', u: '/sluice/consumers', h: { authorization: `bearer ${TOKEN}` }, note: 'lowercase scheme' },
  { m: 'GET', u: '/sluice/consumers', h: { authorization: `Bearer  ${TOKEN}` }, note: 'double space' },
  { m: 'GET', u: '/sluice/consumers', h: auth },
  { m: 'HEAD', u: '/sluice/consumers', h: auth },
  { m: 'HEAD', u: '/sluice/consumers' },
  { m: 'OPTIONS', u: '/sluice/consumers', h: auth },
  { m: 'DELETE', u: '/sluice/consumers/poison', h: auth },
  { m: 'PUT', u: '/sluice/consumers/poison/restart', h: { ...auth, ...J }, b: '{"from":"now"}' },
  { m: 'GET', u: '/sluice/consumers/poison/restart', h: auth, note: 'GET on a POST route' },
  { m: 'GET', u: '/sluice/nope', h: auth },
  { m: 'GET', u: '/sluice/nope' , note: 'unknown no auth'},
  { m: 'GET', u: '/sluice/consumers/missing', h: auth },
  { m: 'GET', u: '/sluice/consumers/poison', h: auth },
  { m: 'GET', u: '/sluice/consumers/poison?instance=', h: auth },
  { m: 'GET', u: '/sluice/consumers/poison?foo=1', h: auth },
  { m: 'GET', u: '/sluice/consumers/poison?instance=a&instance=b', h: auth },
  { m: 'GET', u: '/sluice/consumers/poison/events/0', h: auth },
  { m: 'GET', u: '/sluice/consumers/poison/events/99999999999999999999', h: auth },
  { m: 'GET', u: '/sluice/consumers/poison/events/9223372036854775808', h: auth },
  { m: 'GET', u: '/sluice/consumers/poison/events/999', h: auth },
  { m: 'GET', u: '/sluice/consumers/poison/events/2', h: auth },
  { m: 'GET', u: '/sluice/consumers/poison/dead-letters?limit=0', h: auth },
  { m: 'GET', u: '/sluice/consumers/poison/dead-letters?limit=abc', h: auth },
  { m: 'GET', u: '/sluice/consumers/poison/dead-letters?limit=5&limit=6', h: auth },
  { m: 'GET', u: '/sluice/consumers/poison/dead-letters/9223372036854775808', h: auth },
  { m: 'GET', u: '/sluice/consumers/%ff', h: auth },
  { m: 'GET', u: '/sluice/consumers/' + 'x'.repeat(150), h: auth },
  { m: 'GET', u: '/sluice/audit?limit=1001', h: auth },
  { m: 'GET', u: '/sluice/audit?consumer=', h: auth },
  { m: 'POST', u: '/sluice/consumers/poison/restart', h: auth, b: '{"from":"now"}', note: 'no content-type' },
  { m: 'POST', u: '/sluice/consumers/poison/restart', h: { ...auth, 'content-type': 'text/plain' }, b: '{"from":"now"}' },
  { m: 'POST', u: '/sluice/consumers/poison/restart', h: { ...auth, ...J }, b: '{"from":', note: 'bad json' },
  { m: 'POST', u: '/sluice/consumers/poison/restart', h: { ...auth, ...J }, b: '', note: 'empty body' },
  { m: 'POST', u: '/sluice/consumers/poison/restart', h: { ...auth, ...J }, b: 'null', note: 'null body' },
  { m: 'POST', u: '/sluice/consumers/poison/restart', h: { ...auth, ...J }, b: '[]', note: 'array body' },
  { m: 'POST', u: '/sluice/consumers/poison/restart', h: { ...auth, ...J }, b: '"now"', note: 'string body' },
  { m: 'POST', u: '/sluice/consumers/poison/restart', h: { ...auth, ...J }, b: '{"from":"later"}' },
  { m: 'POST', u: '/sluice/consumers/poison/restart', h: { ...auth, ...J }, b: '{"from":"99999"}', note: 'beyond head' },
  { m: 'POST', u: '/sluice/consumers/poison/restart', h: { ...auth, ...J }, b: '{"from":"9999999999999999999"}', note: 'beyond int8' },
  { m: 'POST', u: '/sluice/consumers/poison/restart', h: { ...auth, ...J }, b: '{"from":"now","instanceId":"zz"}' },
  { m: 'POST', u: '/sluice/consumers/poison/restart?instance=a', h: { ...auth, ...J }, b: '{"from":"now","instanceId":"b"}' },
  { m: 'POST', u: '/sluice/consumers/poison/restart', h: { ...auth, ...J, origin: 'https://evil.example' }, b: '{"from":"now"}' },
  { m: 'POST', u: '/sluice/consumers/poison/restart', h: { ...auth, ...J, 'sec-fetch-site': 'cross-site' }, b: '{"from":"now"}' },
  { m: 'POST', u: '/sluice/consumers/poison/disable', h: { ...auth, ...J }, b: '{"forMs":"5000"}' },
  { m: 'POST', u: '/sluice/consumers/poison/disable', h: { ...auth, ...J }, b: '{"formMs":5000}' },
  { m: 'POST', u: '/sluice/consumers/poison/disable', h: { ...auth, ...J }, b: '{"forMs":500}' },
  { m: 'POST', u: '/sluice/consumers/poison/disable', h: { ...auth, ...J }, b: '{"until":"yesterday"}' },
  { m: 'POST', u: '/sluice/consumers/poison/disable', h: { ...auth, ...J }, b: '{"until":"2020-01-01T00:00:00Z"}', note: 'until in the past' },
  { m: 'POST', u: '/sluice/consumers/poison/disable', h: { ...auth, ...J }, b: '{"until":"2030-01-01T00:00:00Z","forMs":5000}', note: 'both' },
  { m: 'POST', u: '/sluice/consumers/poison/disable', h: { ...auth, ...J }, b: '{"until":"2030-12-31T23:59:60Z"}', note: 'leap second' },
  { m: 'POST', u: '/sluice/consumers/poison/disable', h: { ...auth, ...J }, b: '{"until":"275760-09-14T00:00:00Z"}', note: 'huge year' },
  { m: 'POST', u: '/sluice/consumers/poison/disable', h: { ...auth, ...J }, b: '{"reason":"' + 'r'.repeat(1001) + '"}' },
  { m: 'POST', u: '/sluice/consumers/poison/skip', h: { ...auth, ...J }, b: '{"eventId":1}' },
  { m: 'POST', u: '/sluice/consumers/poison/skip', h: { ...auth, ...J }, b: '{"eventId":"1"}', note: 'wrong event' },
  { m: 'POST', u: '/sluice/consumers/poison/fence', h: { ...auth, ...J }, b: '{"eventId":"1"}', note: 'not a gap' },
  { m: 'POST', u: '/sluice/consumers/poison/dead-letters/replay', h: { ...auth, ...J }, b: '{"ids":["424242"]}' },
  { m: 'POST', u: '/sluice/consumers/poison/dead-letters/replay', h: { ...auth, ...J }, b: '{"ids":[1]}' },
  { m: 'POST', u: '/sluice/consumers/poison/dead-letters/replay', h: { ...auth, ...J }, b: '{"limit":0}' },
  { m: 'POST', u: '/sluice/consumers/poison/enable', h: { ...auth, ...J }, b: '{"__proto__":{"x":1}}' },
  { m: 'POST', u: '/sluice/consumers/poison/enable', h: { ...auth, ...J }, b: '{"a":' .repeat(40) + '1' + '}'.repeat(40) },
  { m: 'POST', u: '/sluice/consumers/missing/enable', h: { ...auth, ...J }, b: '{}' },
  { m: 'POST', u: '/sluice/consumers/poison/lanes', h: { ...auth, ...J }, b: '{"lanes":0}' },
  { m: 'POST', u: '/sluice/consumers/poison/lanes', h: { ...auth, ...J }, b: '{"lanes":2000}' },
  { m: 'POST', u: '/sluice/consumers/poison/rebuild/approve', h: { ...auth, ...J }, b: '{}' },
  { m: 'POST', u: '/sluice/consumers/poison/versions/1/drop', h: { ...auth, ...J }, b: '{}' },
  { m: 'POST', u: '/sluice/consumers/poison/versions/0/drop', h: { ...auth, ...J }, b: '{}' },
  { m: 'GET', u: '/sluice/consumers/poison/parked-keys/events', h: auth, note: 'missing key' },
  { m: 'POST', u: '/sluice/consumers/poison/parked-keys/replay', h: { ...auth, ...J }, b: '{"key":"nope"}' },
  { m: 'GET', u: '/sluice/consumers/poison/rebuild', h: auth },
  { m: 'GET', u: '/sluice/rebuilds', h: auth },
  { m: 'GET', u: '/sluice/health', h: auth },
  { m: 'GET', u: '/sluice/health' },
  { m: 'GET', u: '/sluice/health?x=1', h: auth },
];
for (const r of reqs) {
  const a0 = await audits(); const s0 = await state();
  const res = await app.inject({ method: r.m as any, url: r.u, headers: r.h, payload: r.b });
  const a1 = await audits(); const s1 = await state();
  let code = '-'; let isJson = false;
  try { const b = JSON.parse(res.body); isJson = true; code = b.code ?? (Array.isArray(b) ? `[array ${b.length}]` : (b.status ? 'status=' + b.status : Object.keys(b).join(','))); } catch {}
  const changed = (a1 !== a0 ? ' AUDIT+' + (a1 - a0) : '') + (s1 !== s0 ? ' STATE CHANGED' : '');
  log(`${r.m} ${r.u.slice(0, 70)} ${r.note ?? ''} -> ${res.statusCode} ${code} json=${isJson || res.body === ''} cc=${res.headers['cache-control'] ?? 'NONE'} ct=${String(res.headers['content-type']).slice(0, 30)}${changed}${!isJson && res.body ? ' body=' + res.body.slice(0, 80) : ''}${res.statusCode >= 400 && isJson ? ' msg=' + JSON.parse(res.body).message?.slice(0, 100) : ''}`);
}
await app.close();
await sql.end();

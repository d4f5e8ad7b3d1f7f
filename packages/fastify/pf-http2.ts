import Fastify from 'fastify';
import sluice, { bearerAuth, basicAuth } from '@sluice/fastify';
import { createDispatcher } from '@sluice/core';
import { pool, freshSchema, sleep, log, TOKEN } from './pf-lib.ts';
const schema = 'pf_http2';
await freshSchema(schema);
const sql = pool();
const consumers = [{ name: 'c', handler: async () => {} }];
const show = (label: string, res: any) => { let code = ''; try { const b = JSON.parse(res.body); code = b.code ?? (Array.isArray(b) ? '[array]' : b.status ?? ''); } catch { code = 'NONJSON:' + res.body.slice(0, 40); } log(label, '->', res.statusCode, code, 'cc=' + (res.headers['cache-control'] ?? 'NONE'), res.headers['allow'] ? 'allow=' + res.headers['allow'] : '', res.headers['www-authenticate'] ? 'wa=' + res.headers['www-authenticate'] : '', res.headers.location ? 'loc=' + res.headers.location : ''); };
const J = { 'content-type': 'application/json' };
// readOnly
{
  const app = Fastify();
  await app.register(sluice, { sql, schema, consumers, ops: { auth: bearerAuth(TOKEN), readOnly: true } });
  await app.ready();
  const h = { authorization: `Bearer ${TOKEN}` };
  show('RO restart', await app.inject({ method: 'POST', url: '/sluice/consumers/c/restart', headers: { ...h, ...J }, payload: '{"from":"now"}' }));
  show('RO restart no CT', await app.inject({ method: 'POST', url: '/sluice/consumers/c/restart', headers: h, payload: '{"from":"now"}' }));
  show('RO restart no auth', await app.inject({ method: 'POST', url: '/sluice/consumers/c/restart', headers: J, payload: '{"from":"now"}' }));
  show('RO list', await app.inject({ method: 'GET', url: '/sluice/consumers', headers: h }));
  show('RO dashboard shell no auth', await app.inject({ method: 'GET', url: '/sluice/' }));
  show('RO dashboard bare prefix', await app.inject({ method: 'GET', url: '/sluice' }));
  show('RO dashboard bare prefix q', await app.inject({ method: 'GET', url: '/sluice?x=1' }));
  show('RO dashboard', await app.inject({ method: 'GET', url: '/sluice/dashboard' }));
  show('RO dashboard asset?', await app.inject({ method: 'GET', url: '/sluice/dashboard.js' }));
  const page = await app.inject({ method: 'GET', url: '/sluice/' });
  log('page read-only attr', /data-read-only="true"/.test(page.body), 'data-auth', page.body.match(/data-auth="(\w+)"/)?.[1]);
  const assets = [...page.body.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]);
  for (const a of assets) show('  asset ' + a, await app.inject({ method: 'GET', url: '/sluice/' + a.replace(/^\.\//, '') }));
  await app.close();
}
// insecure
{
  const app = Fastify();
  await app.register(sluice, { sql, schema, consumers, ops: { insecure: true } });
  await app.ready();
  show('INS localhost', await app.inject({ method: 'GET', url: '/sluice/consumers', headers: { host: 'localhost:3000' } }));
  show('INS evil host', await app.inject({ method: 'GET', url: '/sluice/consumers', headers: { host: 'evil.example' } }));
  show('INS 127.1.2.3', await app.inject({ method: 'GET', url: '/sluice/consumers', headers: { host: '127.1.2.3:80' } }));
  show('INS localhost.evil', await app.inject({ method: 'GET', url: '/sluice/consumers', headers: { host: 'localhost.evil.example' } }));
  show('INS 127.0.0.1.nip.io', await app.inject({ method: 'GET', url: '/sluice/consumers', headers: { host: '127.0.0.1.nip.io' } }));
  show('INS [::1]:8080', await app.inject({ method: 'GET', url: '/sluice/consumers', headers: { host: '[::1]:8080' } }));
  show('INS 0.0.0.0', await app.inject({ method: 'GET', url: '/sluice/consumers', headers: { host: '0.0.0.0:3000' } }));
  show('INS 2130706433 (decimal 127.0.0.1)', await app.inject({ method: 'GET', url: '/sluice/consumers', headers: { host: '2130706433' } }));
  show('INS [::ffff:127.0.0.1]', await app.inject({ method: 'GET', url: '/sluice/consumers', headers: { host: '[::ffff:127.0.0.1]' } }));
  show('INS write localhost', await app.inject({ method: 'POST', url: '/sluice/consumers/c/enable', headers: { host: 'localhost', ...J }, payload: '{}' }));
  const aud = await app.inject({ method: 'GET', url: '/sluice/audit', headers: { host: 'localhost' } });
  log('INS audit actor', JSON.parse(aud.body)[0]?.actor);
  await app.close();
}
// basic
{
  const app = Fastify();
  await app.register(sluice, { sql, schema, consumers, ops: { auth: basicAuth({ username: 'ops', password: 'pw-123456789012' }), prefix: '/internal/sluice/' } });
  await app.ready();
  const b = 'Basic ' + Buffer.from('ops:pw-123456789012').toString('base64');
  show('BASIC no creds', await app.inject({ method: 'GET', url: '/internal/sluice/consumers' }));
  show('BASIC page no creds', await app.inject({ method: 'GET', url: '/internal/sluice/' }));
  show('BASIC ok', await app.inject({ method: 'GET', url: '/internal/sluice/consumers', headers: { authorization: b } }));
  show('BASIC user only prefix', await app.inject({ method: 'GET', url: '/internal/sluice', headers: { authorization: b } }));
  show('BASIC /sluice default gone', await app.inject({ method: 'GET', url: '/sluice/consumers', headers: { authorization: b } }));
  await app.close();
}
// options validation
async function tryReg(label: string, opts: any) {
  const app = Fastify();
  try { await app.register(sluice, { sql, schema, consumers, ...opts }); await app.ready(); log(label, '-> registered OK'); } catch (e: any) { log(label, '->', e.code, (e.message as string).slice(0, 140)); }
  try { await app.close(); } catch {}
}
await tryReg('no auth', { ops: {} });
await tryReg('readonly typo', { ops: { auth: bearerAuth(TOKEN), readonly: true } });
await tryReg('readOnly "true"', { ops: { auth: bearerAuth(TOKEN), readOnly: 'true' } });
await tryReg('prefix', { prefix: '/x' });
await tryReg('user dispatcher', { dispatcher: createDispatcher({ sql, schema, consumers }) });
await tryReg('pollInterval typo', { pollInterval: 10 });
await tryReg('logLevel', { logLevel: 'warn' });
await tryReg('migrate "no"', { migrate: 'no' });
await tryReg('ops null', { ops: null });
await tryReg('logger null', { logger: null });
await tryReg('schema bad', { schema: 'Bad-Name' });
await tryReg('ops.requestTimeoutMs = lockTimeoutMs', { ops: { auth: bearerAuth(TOKEN), lockTimeoutMs: 1000, requestTimeoutMs: 1000 } });
await tryReg('allowedOrigins trailing slash', { ops: { auth: bearerAuth(TOKEN), allowedOrigins: ['https://a.example/'] } });
await tryReg('prefix //', { ops: { auth: bearerAuth(TOKEN), prefix: '/a//b' } });
await tryReg('prefix /', { ops: { auth: bearerAuth(TOKEN), prefix: '/' } });
await tryReg('bearer short', { ops: { auth: bearerAuth('short') } });
await sql.end();

// Walk measurement: V8 precise coverage call counts over package sources (tests excluded, __name excluded).
import { Session } from 'node:inspector/promises';
import postgres from 'postgres';
import { append, createDispatcher, defineConsumer, migrate, transaction } from '@sluice/core';
import { createAdmin } from '@sluice/admin';

const root = process.env.WALK_ROOT ?? '/work/main';
const url = process.env.DATABASE_URL!;
const session = new Session();
session.connect();
await session.post('Profiler.enable');
await session.post('Profiler.startPreciseCoverage', { callCount: true, detailed: false });

async function measure(label: string, fn: () => Promise<unknown>) {
  await session.post('Profiler.takePreciseCoverage'); // reset
  await fn();
  const { result } = (await session.post('Profiler.takePreciseCoverage')) as any;
  const files = new Map<string, number>();
  for (const script of result) {
    const u: string = script.url;
    if (!u.startsWith(`file://${root}/packages/`) || !u.includes('/src/') || /\.test\./.test(u) || u.includes('/packages/testing/')) continue;
    for (const f of script.functions) {
      if (f.functionName === '__name') continue;
      const c = f.ranges[0].count;
      if (c > 0) files.set(u, (files.get(u) ?? 0) + c);
    }
  }
  const total = [...files.values()].reduce((a, b) => a + b, 0);
  console.log(`${label}: files ${files.size} returns ${total}`);
  if (process.env.WALK_FUNCS) for (const script of result) { const u: string = script.url; if (!u.startsWith(`file://${root}/packages/`) || !u.includes('/src/') || /\.test\./.test(u) || u.includes('/packages/testing/')) continue; for (const f of script.functions) { const c = f.ranges[0].count; if (c > 0 && f.functionName !== '__name') console.log(`    ${c}\t${u.replace(`file://${root}/packages/`, '')}\t${f.functionName || '(anon)'}@${f.ranges[0].startOffset}`); } }
  if (process.env.WALK_VERBOSE) for (const [u, c] of [...files].sort((a, b) => b[1] - a[1])) console.log(`  ${c}\t${u.replace(`file://${root}/`, '')}`);
}

const sql = postgres(url, { max: 5, onnotice: () => {} });
const logger = { info() {}, warn() {}, error() {}, debug() {} } as any;
const sA = `walk_a_${process.pid}`;
const sB = `walk_b_${process.pid}`;
await migrate(sql, { schema: sA });
await migrate(sql, { schema: sB });
let poison = -1n;
const add = (schema: string, type: string) =>
  transaction(sql, (tx: any) => append(tx, [{ type, streamId: 's1', data: {} }], { schema }));
const a = defineConsumer({ name: 'a', handler: async () => {} });
const b = defineConsumer({ name: 'b', errorPolicy: { maxAttempts: 1 }, handler: async (e: any) => { if (e.id === poison) throw new Error('poison'); } });
const dA = createDispatcher({ sql, schema: sA, consumers: [a], pollIntervalMs: 3_600_000, logger });
const dB = createDispatcher({ sql, schema: sB, consumers: [b], pollIntervalMs: 3_600_000, logger });
await dA.ensureRegistered();
await dB.ensureRegistered();
const admin = createAdmin({ sql, schema: sB });
for (let i = 0; i < 2; i++) { await add(sA, 'w'); await dA.runOnce(); await add(sB, 'w'); await dB.runOnce(); }
const p = (await add(sB, 'poison')) as any;
poison = (Array.isArray(p) ? p[0] : p).id;
await dB.runOnce();
await dB.runOnce();
await add(sB, 'next');
await measure('A (append in transaction, runOnce)', async () => {
  await add(sA, 'x');
  await dA.runOnce();
});
await measure('B (skip dead consumer event, runOnce)', async () => {
  await admin.skip('b', { eventId: poison });
  await dB.runOnce();
});
await dA.stop();
await dB.stop();
const rows = await sql.unsafe(`select status, cursor::text from ${sB}.consumers`);
console.log('B row after', rows);
await sql.unsafe(`drop schema ${sA} cascade`);
await sql.unsafe(`drop schema ${sB} cascade`);
await sql.end();

// T7 (docs/operating.md, "Database client"): a backend-kill storm against one dispatcher process on
// the stock postgres.js release users install. For STORM_MS (40 s in the CI profile) a backend of
// the dispatcher's connections (its turns, pre-checks, LISTEN, the app's pool it was given) is
// terminated every 50–200 ms while writers append; then quiet. The process must never die, every
// consumer must have received every committed event within 30 s of the quiet, a transactional
// consumer's rows must equal the log, and stop() must return.
import { freshSchema, until } from '@sluice/testing';
import { setTimeout as sleep } from 'node:timers/promises';
import { randomBytes } from 'node:crypto';
import { readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { append, transaction } from '@sluice/core';
import { tables } from '@sluice/core/internal';
import { useTestDatabase } from '@sluice/testing/vitest';
import { afterAll, expect, test } from 'vitest';
import { profile } from '../report/results.js';
import { STORM_CONSUMERS, type StormChildConfig, type StormDelivery } from './storm-shared.js';
import { check, killChildren, ScenarioRecorder, startChild } from './support.js';

const db = await useTestDatabase();
const recorder = new ScenarioRecorder('scenarios-storm');
const CHILD = new URL('./storm-child.ts', import.meta.url);
const STORM_MS = Number(process.env['STORM_MS'] ?? (profile() === 'soak' ? 120_000 : 40_000));
const SERVED_WITHIN_MS = 30_000;

afterAll(async () => {
  await killChildren();
  await recorder.write(db.sql);
});

async function deliveries(file: string): Promise<StormDelivery[]> {
  const text = await readFile(file, 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter((line) => line.endsWith('}'))
    .map((line) => JSON.parse(line) as StormDelivery);
}

test('T7: a backend-kill storm on the stock driver: the process lives, every consumer is served again, stop() returns', async () => {
  await recorder.run('T7', 'Backend-kill storm, stock postgres.js', ['I1', 'I3', 'I9'], async (figures) => {
    const schema = await freshSchema(db.sql, 'storm');
    const file = join(tmpdir(), `sluice-storm-${randomBytes(4).toString('hex')}.jsonl`);
    const config: Omit<StormChildConfig, 'parentPid'> = { url: db.url, schema, file, instanceId: 'storm-1' };
    const child = startChild(CHILD, config);
    let died: string | undefined;
    void child.exited.then(({ code, signal }) => {
      died ??= `exited (${code ?? signal}) during the run`;
    });
    await child.announced('READY');

    // Writers: small transactions through transaction(), on the test's own pool (never stormed).
    const committed: bigint[] = [];
    const writing = { on: true };
    const writer = (async () => {
      let n = 0;
      while (writing.on) {
        const events = Array.from({ length: 1 + (n % 3) }, (_, i) => ({
          streamId: `s-${(n + i) % 17}`,
          type: 'Stormy',
          data: { n: n + i },
        }));
        n += events.length;
        const stored = await transaction(db.sql, (tx) => append(tx, events, { schema }));
        committed.push(...stored.map((e) => e.id));
        await sleep(20);
      }
    })();

    // The storm: a backend of the dispatcher process (every connection it holds carries an
    // application name other than the test's) terminated every 50–200 ms.
    const terminated: Record<string, number> = {};
    const stormStarted = performance.now();
    while (performance.now() - stormStarted < STORM_MS && died === undefined) {
      await sleep(50 + Math.random() * 150);
      const victims = await db.sql<{ pid: number; app: string }[]>`
        select pid, application_name as app from pg_stat_activity
        where datname = current_database() and backend_type = 'client backend'
          and (application_name like 'storm-%' or application_name like 'sluice%')`;
      const victim = victims[Math.floor(Math.random() * victims.length)];
      if (!victim) continue;
      await db.sql`select pg_terminate_backend(${victim.pid})`;
      const kind = victim.app.replace(/[:#].*$/, '');
      terminated[kind] = (terminated[kind] ?? 0) + 1;
    }
    const quietAt = performance.now();
    figures['storm s'] = Math.round((quietAt - stormStarted) / 1000);
    figures['backends terminated'] = Object.entries(terminated)
      .map(([kind, n]) => `${kind} ${n}`)
      .join(', ');
    recorder.faults['backends terminated'] = Object.values(terminated).reduce((a, b) => a + b, 0);

    // Quiet: a little more writing, then every consumer must catch up on everything committed.
    await sleep(1_000);
    writing.on = false;
    await writer;
    const servedAfter: Record<string, number> = {};
    const expected = new Set(committed.map(String));
    await until(
      async () => {
        if (died !== undefined) return true;
        const seen = new Map<string, Set<string>>();
        for (const d of await deliveries(file)) {
          let ids = seen.get(d.c);
          if (!ids) seen.set(d.c, (ids = new Set()));
          ids.add(d.id);
        }
        for (const name of STORM_CONSUMERS) {
          if (servedAfter[name] !== undefined) continue;
          const ids = seen.get(name) ?? new Set<string>();
          if ([...expected].every((id) => ids.has(id))) servedAfter[name] = performance.now() - quietAt;
        }
        return STORM_CONSUMERS.every((name) => servedAfter[name] !== undefined);
      },
      SERVED_WITHIN_MS + 5_000,
      'every consumer to receive every committed event',
      250,
    ).catch(() => undefined);
    figures['events committed'] = committed.length;
    figures['served again after the quiet, max ms'] = Math.round(
      Math.max(...STORM_CONSUMERS.map((name) => servedAfter[name] ?? Number.POSITIVE_INFINITY)),
    );
    figures['consumers served again'] = `${Object.keys(servedAfter).length}/${STORM_CONSUMERS.length}`;

    const all = await deliveries(file);
    const counts = new Map<string, number>();
    for (const d of all) counts.set(`${d.c} ${d.id}`, (counts.get(`${d.c} ${d.id}`) ?? 0) + 1);
    figures['deliveries'] = all.length;
    figures['duplicates'] = [...counts.values()].reduce((sum, n) => sum + n - 1, 0);
    const t = tables(db.sql, schema);
    const [rows] = await db.sql<{ missing: number; extra: number }[]>`
      select (select count(*)::int from ${t.events} e
              where not exists (select 1 from ${db.sql(`${schema}.projection_rows`)} p where p.event_id = e.id)) as missing,
             (select count(*)::int from ${db.sql(`${schema}.projection_rows`)} p
              where not exists (select 1 from ${t.events} e where e.id = p.event_id)) as extra`;
    figures['transactional rows missing/extra'] = `${rows?.missing ?? -1}/${rows?.extra ?? -1}`;

    // stop() returns, and the process exits 0.
    const stopAsked = performance.now();
    child.kill('SIGTERM');
    const exit = await Promise.race([child.exited, sleep(20_000).then(() => undefined)]);
    const stopLine = child.output().match(/STOPPED (\d+)/);
    figures['stop() ms'] = stopLine ? Number(stopLine[1]) : 'did not return';
    figures['exit'] = exit
      ? `${exit.code ?? exit.signal} after ${Math.round(performance.now() - stopAsked)} ms`
      : 'hung';
    const fatal = child.output().match(/FATAL .*/)?.[0];
    figures['process deaths'] = died === undefined || exit?.code === 0 ? 0 : 1;
    await rm(file, { force: true });

    check(fatal === undefined, `the dispatcher process died: ${fatal ?? ''}\n${child.output().slice(-3000)}`);
    check(
      died === undefined || exit?.code === 0,
      `the dispatcher process ${died ?? ''}\n${child.output().slice(-3000)}`,
    );
    check(
      STORM_CONSUMERS.every((name) => (servedAfter[name] ?? Number.POSITIVE_INFINITY) <= SERVED_WITHIN_MS),
      `not every consumer was served again within ${SERVED_WITHIN_MS} ms of the quiet: ${JSON.stringify(servedAfter)}\n${child.output().slice(-3000)}`,
    );
    check(
      rows?.missing === 0 && rows.extra === 0,
      `projection rows differ from the log: ${JSON.stringify(rows)}`,
    );
    check(exit?.code === 0 && stopLine !== null, `stop() did not return cleanly: ${JSON.stringify(exit)}`);
    expect(committed.length).toBeGreaterThan(0);
  });
});

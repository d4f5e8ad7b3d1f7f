// docs/reliability.md#s1: a pre-loaded backlog (1M events, S1_EVENTS; inserted by one
// `insert … select generate_series` statement) drained by one no-op consumer with batchSize 1000.
// Figures: drain time, events/s, max RSS of this process during the drain. Timing targets are
// asserted in the soak profile (and in CI only on an idle machine); I1 and order always are.
import { consumerRow, freshSchema } from '@sluice/testing';
import { setTimeout as sleep } from 'node:timers/promises';
import { cpus, loadavg } from 'node:os';
import { type EventRecord } from '@sluice/core';
import { tables } from '@sluice/core/internal';
import { useTestDatabase } from '@sluice/testing/vitest';
import { afterAll, expect, test } from 'vitest';
import { profile } from '../report/results.js';
import { check, machineLoaded, quietDispatcher, round, ScenarioRecorder } from './support.js';

const db = await useTestDatabase();
const recorder = new ScenarioRecorder('scenarios-backlog');
const SOAK = profile() === 'soak';
const EVENTS = Number(process.env['S1_EVENTS'] ?? 1_000_000);
const TARGET_EVENTS_PER_S = 3_000;
const TARGET_RSS_MIB = 256;
const MiB = 1024 * 1024;

afterAll(async () => {
  await recorder.write(db.sql);
});

test(`S1: a backlog of ${EVENTS} events drained by one no-op consumer (batchSize 1000)`, async () => {
  await recorder.run('S1', `Backlog of ${EVENTS} events, 1 consumer`, ['I1', 'I9'], async (figures) => {
    const schema = await freshSchema(db.sql, 's1');
    const t = tables(db.sql, schema);
    const insertStarted = performance.now();
    await db.sql`
      insert into ${t.events} (stream_id, type, data)
      select 'stream-' || (g % 100), 'Backlog', jsonb_build_object('n', g)
      from generate_series(1, ${EVENTS}::int) g`;
    const insertMs = performance.now() - insertStarted;
    const [range] = await db.sql<{ first: string; last: string }[]>`
      select min(id)::text as first, max(id)::text as last from ${t.events}`;
    const first = BigInt(range!.first);
    const last = BigInt(range!.last);

    let delivered = 0;
    let anomalies = 0;
    let expected = first;
    const consumer = {
      name: 's1-noop',
      batchSize: 1_000,
      handler: (event: EventRecord) => {
        if (event.id !== expected) anomalies += 1; // a skip, a repeat or an inversion
        expected = event.id + 1n;
        delivered += 1;
      },
    };
    const dispatcher = quietDispatcher(db.sql, schema, [consumer]);
    const loadBefore = loadavg()[0] ?? 0;
    const loaded = machineLoaded();
    const rssBefore = process.memoryUsage().rss;
    let rssMax = rssBefore;
    const sampling = { on: true };
    const sampler = (async () => {
      while (sampling.on) {
        rssMax = Math.max(rssMax, process.memoryUsage().rss);
        await sleep(20);
      }
    })();
    const timeoutMs = SOAK ? 1_800_000 : 240_000;
    const started = performance.now();
    let drainMs = Number.NaN;
    try {
      await dispatcher.start();
      while (delivered < EVENTS && performance.now() - started < timeoutMs) await sleep(20);
      drainMs = performance.now() - started;
    } finally {
      sampling.on = false;
      await sampler;
      await dispatcher.stop();
    }
    const state = await consumerRow(db.sql, schema, 's1-noop');
    const rate = delivered / (drainMs / 1000);
    figures['events'] = EVENTS;
    figures['insert (one statement, s)'] = round(insertMs / 1000, 1);
    figures['drain (s)'] = round(drainMs / 1000, 1);
    figures['events/s'] = round(rate);
    figures['RSS before / max during drain (MiB)'] = `${round(rssBefore / MiB)} / ${round(rssMax / MiB)}`;
    figures['RSS growth (MiB)'] = round((rssMax - rssBefore) / MiB);
    figures['load average at start / cores'] = `${round(loadBefore, 1)} / ${cpus().length}`;
    figures['delivered / anomalies (skips, repeats, inversions)'] = `${delivered} / ${anomalies}`;
    figures['final cursor'] = state.cursor.toString();
    const assertTiming = SOAK || !loaded;
    figures['timing targets'] = assertTiming
      ? `asserted (≥ ${TARGET_EVENTS_PER_S} events/s${SOAK ? `, RSS ≤ ${TARGET_RSS_MIB} MiB` : ''})`
      : `reported only: the machine is loaded (target ≥ ${TARGET_EVENTS_PER_S} events/s, RSS ≤ ${TARGET_RSS_MIB} MiB at 1M)`;

    check(delivered === EVENTS, `drained ${delivered} of ${EVENTS} events in ${round(drainMs / 1000)} s`);
    expect(anomalies).toBe(0);
    expect(state.cursor).toBe(last);
    expect(last - first + 1n).toBe(BigInt(EVENTS));
    if (assertTiming) expect(rate).toBeGreaterThanOrEqual(TARGET_EVENTS_PER_S);
    if (SOAK) expect(rssMax / MiB).toBeLessThanOrEqual(TARGET_RSS_MIB);
  });
});

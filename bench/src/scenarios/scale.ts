import { DEFAULTS } from '@sluice/core';
import { progress } from '../harness/progress.js';
import { summarize } from '../harness/stats.js';
import { sluiceTemplate } from '../harness/templates.js';
import { DeliveryTracker } from '../harness/tracker.js';
import { RowCollector, type ScenarioResult } from '../report/types.js';
import { benchDispatcher, pool, trackingConsumers } from '../systems/sluice.js';
import { runDatabase, type ScenarioContext } from './context.js';

const SAMPLE_MS = 100;
const MiB = 1024 * 1024;

export interface ScaleSample {
  readonly atMs: number;
  readonly delivered: number;
  readonly rssBytes: number;
}

/**
 * Scenario 5: one consumer drains a large backlog. Throughput and this process's RSS are sampled
 * every 250 ms, to show whether throughput holds and memory stays bounded as the cursor moves.
 */
export async function scale(ctx: ScenarioContext): Promise<ScenarioResult> {
  const { config } = ctx;
  const events = config.scale.events;
  const rows = new RowCollector('scale');
  const template = await sluiceTemplate(ctx, events);
  const series: string[] = [];

  for (let run = 0; run < config.runs; run++) {
    progress(
      `scale: ${events.toLocaleString('en')} events, one Sluice consumer, run ${run + 1}/${config.runs}`,
    );
    const db = await runDatabase(ctx, template, 'scale');
    const sql = pool(db.url, 6);
    const tracker = new DeliveryTracker(1, events);
    const dispatcher = benchDispatcher(sql, trackingConsumers(1, tracker));
    const samples: ScaleSample[] = [];
    let timer: NodeJS.Timeout | undefined;
    try {
      await dispatcher.ensureRegistered();
      const rssAtStart = process.memoryUsage().rss;
      const meter = db.meter();
      await meter.start();
      const t0 = performance.now();
      const sample = () => {
        samples.push({
          atMs: performance.now() - t0,
          delivered: tracker.distinct,
          rssBytes: process.memoryUsage.rss(),
        });
      };
      sample();
      timer = setInterval(sample, SAMPLE_MS);
      await dispatcher.start();
      const complete = await tracker.whenComplete(Math.max(120_000, events / 2));
      clearInterval(timer);
      sample();
      const m = await meter.stop();
      if (!complete) progress('  ! did not finish in time: counted as lost');

      const rate = (events * 1000) / m.wallMs;
      // Deliveries at any time of the run, interpolated between samples (short runs have few).
      const deliveredAt = (atMs: number): number => {
        const after = samples.findIndex((s) => s.atMs >= atMs);
        if (after <= 0) return samples[Math.max(0, after)]?.delivered ?? 0;
        const a = samples[after - 1] as ScaleSample;
        const b = samples[after] as ScaleSample;
        return (
          a.delivered + ((b.delivered - a.delivered) * (atMs - a.atMs)) / Math.max(1e-9, b.atMs - a.atMs)
        );
      };
      const end = samples[samples.length - 1]?.atMs ?? m.wallMs;
      const rateBetween = (fromMs: number, toMs: number) =>
        ((deliveredAt(toMs) - deliveredAt(fromMs)) * 1000) / (toMs - fromMs);
      // Quarters of the draining itself: from the first delivery (start() is reported apart).
      const begin = tracker.firstDeliveryAt === 0 ? 0 : tracker.firstDeliveryAt - t0;
      const quarter = (end - begin) / 4;
      const firstQuarter = rateBetween(begin, begin + quarter);
      const lastQuarter = rateBetween(end - quarter, end);
      // The slowest one-second window (sliding by one sample), for runs of a second or more.
      const perSecond: number[] = [];
      for (let from = begin; from + 1000 <= end; from += SAMPLE_MS)
        perSecond.push(rateBetween(from, from + 1000));
      const spread = summarize(perSecond);
      const peakRss = Math.max(...samples.map((s) => s.rssBytes));
      rows.add(
        `${events.toLocaleString('en')} events, 1 consumer`,
        'Sluice',
        [
          { name: 'events/s', unit: '', value: rate },
          { name: 'last quarter / first quarter', unit: '×', value: lastQuarter / firstQuarter },
          { name: 'slowest second', unit: 'events/s', value: spread.min },
          { name: 'peak RSS', unit: 'MiB', value: peakRss / MiB },
          { name: 'first delivery after start()', unit: 'ms', value: begin },
          { name: 'RSS at start', unit: 'MiB', value: rssAtStart / MiB },
          { name: 'PostgreSQL CPU', unit: '% of a core', value: m.pgCpuPercent },
          { name: 'Node CPU', unit: '% of a core', value: m.nodeCpuPercent },
        ],
        { lost: tracker.lost(), duplicated: tracker.duplicated() },
      );
      progress(
        `  ${Math.round(rate).toLocaleString('en')} events/s (first quarter ${Math.round(firstQuarter).toLocaleString('en')}, last ${Math.round(lastQuarter).toLocaleString('en')}), peak RSS ${(peakRss / MiB).toFixed(0)} MiB`,
      );
      if (run === config.runs - 1) {
        // One line per ~10% of the run: time, delivered, rate over the step, RSS.
        const step = Math.max(1, Math.floor(samples.length / 10));
        for (let i = step; i < samples.length; i += step) {
          const a = samples[i - step];
          const b = samples[i];
          if (!a || !b) continue;
          series.push(
            `| ${(b.atMs / 1000).toFixed(1)} s | ${b.delivered.toLocaleString('en')} | ${Math.round(((b.delivered - a.delivered) * 1000) / (b.atMs - a.atMs)).toLocaleString('en')} | ${(b.rssBytes / MiB).toFixed(0)} MiB |`,
          );
        }
      }
    } finally {
      clearInterval(timer);
      await dispatcher.stop();
      await sql.end();
      await db.drop();
    }
  }

  return {
    scenario: 'scale',
    title: `Scale: a ${events.toLocaleString('en')}-event backlog, one consumer`,
    rows: rows.rows(),
    profiles: [],
    notes: [
      `Sluice at default options (batchSize ${DEFAULTS.batchSize}, maxBatchSize at its default); the consumer runs in a process of its own (only Sluice and postgres.js loaded). ` +
        `Throughput and RSS (process.memoryUsage().rss) sampled every ${SAMPLE_MS} ms; "last quarter / first quarter" compares the delivery rate in the last and first quarter of the time from the first delivery to the last; ` +
        '"slowest second" is the lowest rate over any one-second window.',
      [
        'Last run over time:',
        '',
        '| time | delivered | events/s over the step | RSS |',
        '| --- | --- | --- | --- |',
        ...series,
      ].join('\n'),
    ],
  };
}

import { setTimeout as sleep } from 'node:timers/promises';
import { DEFAULTS, type Consumer } from '@sluice/core';
import type { Measurement } from '../harness/counters.js';
import { graphileTemplate } from '../harness/peer-templates.js';
import { progress } from '../harness/progress.js';
import { StreamOrder } from '../harness/stream-order.js';
import { slowHandlerTemplate } from '../harness/templates.js';
import { DeliveryTracker } from '../harness/tracker.js';
import { SLOW_HANDLER_SYSTEMS as SYSTEMS, slowHandlerCase } from '../names.js';
import { RowCollector, type ScenarioResult } from '../report/types.js';
import { GRAPHILE_SETTINGS, graphileAt, graphileTaskWorker } from '../systems/peers.js';
import { benchDispatcher, consumerName, pool } from '../systems/sluice.js';
import { rotate, runDatabase, type RunDatabase, type ScenarioContext } from './context.js';

/** One system at one concurrency: Sluice with `concurrency` lanes, or graphile-worker. */
interface Contender {
  readonly kind: 'sluice' | 'graphile';
  readonly concurrency: number;
  readonly system: string;
  readonly events: number;
}

interface RunOutcome {
  readonly measurement: Measurement;
  readonly tracker: DeliveryTracker;
  readonly order: StreamOrder;
  readonly complete: boolean;
  /** Sluice: handler calls per lane (by the lane's instance id, '*k/N'). */
  readonly lanes?: ReadonlyMap<string, number>;
}

/**
 * Scenario 6: one consumer whose handler awaits a few milliseconds per event, draining a backlog
 * spread over many streams, by Sluice with 1, 8 and 32 lanes (concurrency = lanes) and by
 * graphile-worker at the same concurrency (one job per event). Events/s against the ceiling that
 * the handler's time sets, and the order per stream each system kept.
 */
export async function slowHandler(ctx: ScenarioContext): Promise<ScenarioResult> {
  const { config } = ctx;
  const { events, oneLaneEvents, streams, handlerMs, lanes, graphileConcurrency } = config.slowHandler;
  const rows = new RowCollector('slow-handler');

  const concurrencies = [...new Set([...lanes, ...graphileConcurrency])].sort((a, b) => a - b);
  const contenders: Contender[] = concurrencies.flatMap((concurrency) => [
    ...(lanes.includes(concurrency)
      ? [
          {
            kind: 'sluice' as const,
            concurrency,
            system: SYSTEMS.sluice(concurrency),
            events: concurrency === 1 ? oneLaneEvents : events,
          },
        ]
      : []),
    ...(graphileConcurrency.includes(concurrency)
      ? [{ kind: 'graphile' as const, concurrency, system: SYSTEMS.graphile, events }]
      : []),
  ]);

  const sluiceTemplates = new Map<number, string>();
  for (const size of new Set(contenders.filter((c) => c.kind === 'sluice').map((c) => c.events))) {
    sluiceTemplates.set(size, await slowHandlerTemplate(ctx, size, streams));
  }
  const graphileTpl = graphileConcurrency.length > 0 ? await graphileTemplate(ctx, events, { streams }) : '';

  for (let run = 0; run < config.runs; run++) {
    for (const contender of rotate(contenders, run)) {
      const { kind, concurrency, system, events: size } = contender;
      const caseName = slowHandlerCase(concurrency);
      progress(
        `slow-handler ${caseName}, ${size.toLocaleString('en')} events: ${system}, run ${run + 1}/${config.runs}`,
      );
      const template = kind === 'graphile' ? graphileTpl : (sluiceTemplates.get(size) as string);
      const db = await runDatabase(ctx, template, `slow_${kind}_${concurrency}`);
      try {
        const outcome =
          kind === 'sluice'
            ? await runSluice(db, concurrency, size, handlerMs)
            : await runGraphile(db, concurrency, size, handlerMs);
        const m = outcome.measurement;
        const delivered = outcome.tracker.distinct;
        const rate = delivered / (m.wallMs / 1000);
        // What `concurrency` calls at once, each of exactly handlerMs, deliver at most.
        const ceiling = (concurrency * 1000) / handlerMs;
        const busiest =
          outcome.lanes === undefined || outcome.lanes.size === 0
            ? undefined
            : Math.max(...outcome.lanes.values()) / (delivered / concurrency);
        rows.add(
          caseName,
          system,
          [
            { name: 'throughput', unit: 'events/s', value: rate },
            { name: 'of the ceiling', unit: '%', value: (100 * rate) / ceiling },
            { name: 'handler call', unit: 'ms', value: outcome.order.meanCallMs },
            { name: 'per-stream inversions', unit: '', value: outcome.order.inversions },
            { name: 'per-stream inversions at finish', unit: '', value: outcome.order.finishInversions },
            { name: 'per-stream overlaps', unit: '', value: outcome.order.overlaps },
            ...(busiest === undefined
              ? []
              : [{ name: 'busiest lane ÷ mean lane', unit: '×', value: busiest }]),
            { name: 'PostgreSQL CPU', unit: '% of a core', value: m.pgCpuPercent },
            { name: 'Node CPU', unit: '% of a core', value: m.nodeCpuPercent },
            {
              name: 'PostgreSQL CPU per event',
              unit: 'µs',
              value: m.pgCpuPercent === undefined ? undefined : (m.pgCpuPercent * m.wallMs * 10) / delivered,
            },
            { name: 'Node CPU per event', unit: 'µs', value: (m.nodeCpuPercent * m.wallMs * 10) / delivered },
            {
              name: 'write transactions per 100 events',
              unit: '',
              value: (100 * m.writeTransactions) / delivered,
            },
            {
              name: 'first handler call after start',
              unit: 'ms',
              value:
                outcome.order.firstStartedAt === undefined
                  ? undefined
                  : outcome.order.firstStartedAt - m.startedAt,
            },
            { name: 'backlog', unit: 'events', value: size },
          ],
          { lost: outcome.tracker.lost(), duplicated: outcome.tracker.duplicated() },
        );
        if (!outcome.complete) progress(`  ! ${system} did not finish in time: counted as lost`);
        progress(
          `  ${Math.round(rate).toLocaleString('en')} events/s (${((100 * rate) / ceiling).toFixed(0)} % of ${Math.round(ceiling).toLocaleString('en')}), ` +
            `per-stream inversions ${outcome.order.inversions} (at finish ${outcome.order.finishInversions}), overlaps ${outcome.order.overlaps}` +
            (busiest === undefined ? '' : `, busiest lane ${busiest.toFixed(2)}× the mean`),
        );
      } finally {
        await db.drop();
      }
    }
  }

  return {
    scenario: 'slow-handler',
    title: `Slow handler: one consumer whose handler awaits ${handlerMs} ms per event, by Sluice with ${listed(lanes)} lane(s) and graphile-worker at the same concurrency`,
    rows: rows.rows(),
    profiles: [],
    notes: [
      `${events.toLocaleString('en')} events of ~1 KB over ${streams.toLocaleString('en')} streams, each event's stream drawn at random (seeded, the same log every run): ` +
        `events of a stream lie at random distances in the log, as with real traffic, so a worker with a few dozen events in hand may hold two of one stream. ` +
        `Every handler call awaits a ${handlerMs} ms timer (timers/promises); "handler call" is how long the calls took, measured (a timer fires late when the event loop is busy). ` +
        `One lane delivers one event at a time, at most 1000 ÷ ${handlerMs} = ${Math.round(1000 / handlerMs)} events/s: it drains the first ${oneLaneEvents.toLocaleString('en')} events of the same log only, so the run fits its time budget.`,
      `Sluice: one shared consumer with lanes: N (docs/design.md §11; each event's lane by the hash of its stream id), concurrency = N turn slots, a pool of N + 2 connections, ` +
        `everything else at its defaults (batchSize ${DEFAULTS.batchSize}, which a lane counts in rows read: ${DEFAULTS.batchSize} × N, about ${DEFAULTS.batchSize} of its own). ` +
        'The timed part starts at start() (rows pre-registered by ensureRegistered(), one per lane) and ends when the last handler call returned.',
      `graphile-worker: run() at concurrency N with maxPoolSize N + 1, localQueue.size ${GRAPHILE_SETTINGS.localQueue.size}, ` +
        `completeJobBatchDelay ${GRAPHILE_SETTINGS.completeJobBatchDelay}, failJobBatchDelay ${GRAPHILE_SETTINGS.failJobBatchDelay} (its published settings at another concurrency); ` +
        `one job per event, queued with addJobs (1,000 per call) before the worker starts, each job's payload the event's with its stream id; the task awaits the same timer. ` +
        'The timed part starts before run() and ends when the last task returned. graphile-worker promises no order among jobs; its figures below are measured, not failures.',
      `Of the ceiling = events/s ÷ (concurrency × 1000 ÷ ${handlerMs}): what calls of exactly ${handlerMs} ms, always that many at once, would deliver. ` +
        'Per-stream inversions = calls that started after a later event of their stream had started; at finish = calls that returned after a later event of their stream had returned ' +
        '(a handler whose effect lands after its await would apply those out of order); per-stream overlaps = calls that started while another event of their stream was in its handler. ' +
        "Sluice's lanes must have none of them (a target); a lane's events are delivered one at a time, so the busiest lane (its events ÷ the mean per lane) bounds how soon the lanes finish. " +
        'CPU as in catch-up: PostgreSQL = every server process, Node = this process, over the timed part. Write transactions = xids assigned in the cluster.',
    ],
  };
}

/** "1, 8 and 32". */
function listed(values: readonly number[]): string {
  return values.length < 2
    ? values.join('')
    : `${values.slice(0, -1).join(', ')} and ${String(values.at(-1))}`;
}

/** Generous: ten times what the calls alone take at full concurrency, and at least a minute. */
function timeoutMs(events: number, concurrency: number, handlerMs: number): number {
  return Math.max(60_000, (10 * events * handlerMs) / concurrency);
}

async function runSluice(
  db: RunDatabase,
  lanes: number,
  events: number,
  handlerMs: number,
): Promise<RunOutcome> {
  const tracker = new DeliveryTracker(1, events);
  const order = new StreamOrder();
  const perLane = new Map<string, number>();
  const consumer: Consumer = {
    name: consumerName(0),
    ...(lanes > 1 ? { lanes } : {}),
    handler: async (event, context) => {
      const seq = (event.data as { seq: number }).seq;
      const call = order.start(event.streamId, seq);
      await sleep(handlerMs);
      order.finish(call);
      perLane.set(context.instanceId, (perLane.get(context.instanceId) ?? 0) + 1);
      tracker.record(0, seq);
    },
  };
  const sql = pool(db.url, lanes + 2);
  const dispatcher = benchDispatcher(sql, [consumer], { concurrency: lanes });
  const meter = db.meter();
  try {
    await dispatcher.ensureRegistered();
    await meter.start();
    await dispatcher.start();
    const complete = await tracker.whenComplete(timeoutMs(events, lanes, handlerMs));
    const measurement = await meter.stop();
    return { measurement, tracker, order, complete, lanes: perLane };
  } finally {
    await dispatcher.stop();
    await sql.end();
  }
}

async function runGraphile(
  db: RunDatabase,
  concurrency: number,
  events: number,
  handlerMs: number,
): Promise<RunOutcome> {
  const tracker = new DeliveryTracker(1, events);
  const order = new StreamOrder();
  const meter = db.meter();
  await meter.start();
  const runner = await graphileTaskWorker(
    db.url,
    async (job) => {
      const call = order.start(String(job['streamId']), job.seq);
      await sleep(handlerMs);
      order.finish(call);
      tracker.record(0, job.seq);
    },
    graphileAt(concurrency),
  );
  try {
    const complete = await tracker.whenComplete(timeoutMs(events, concurrency, handlerMs));
    const measurement = await meter.stop();
    return { measurement, tracker, order, complete };
  } finally {
    await runner.stop();
  }
}

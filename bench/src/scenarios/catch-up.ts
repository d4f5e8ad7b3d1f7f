import { DEFAULTS, type Consumer } from '@sluice/core';
import type postgres from 'postgres';
import type { Measurement } from '../harness/counters.js';
import { statementProfile } from '../harness/counters.js';
import { progress } from '../harness/progress.js';
import { sluiceStatement } from '../harness/statement-steps.js';
import { emmettTemplate, graphileTemplate } from '../harness/peer-templates.js';
import { sluiceTemplate } from '../harness/templates.js';
import { DeliveryTracker } from '../harness/tracker.js';
import { CATCH_UP_LANES, CATCH_UP_SYSTEMS, PROJECTION_CASE } from '../names.js';
import { RowCollector, type ScenarioResult, type StatementProfile } from '../report/types.js';
import {
  createProjection,
  drainMinimal,
  drainRawScan,
  projectedRows,
  projectRow,
  registerCursors,
} from '../systems/baselines.js';
import { EMMETT_SETTINGS, emmettConsumer, GRAPHILE_SETTINGS, graphileWorker } from '../systems/peers.js';
import { benchDispatcher, consumerName, pool, trackingConsumers } from '../systems/sluice.js';
import { rotate, runDatabase, type RunDatabase, type ScenarioContext } from './context.js';

const SYSTEMS = CATCH_UP_SYSTEMS;

type SystemName = (typeof SYSTEMS)[keyof typeof SYSTEMS];

interface RunOutcome {
  readonly measurement: Measurement;
  readonly tracker: DeliveryTracker;
  readonly complete: boolean;
  readonly deliveries: number;
  /** Statements the client sent while measured (postgres.js systems only: its debug hook). */
  readonly sent: number | undefined;
  /** How long Sluice's start() took (the first pass runs after it). */
  readonly startMs?: number;
  /** Sluice: its turn-start records and SAVEPOINTs among the statements sent (the debug hook). */
  readonly sluice?: { readonly turnStarts: number; readonly savepoints: number };
  /** Cases that write one row per event: the rows in the projection table afterwards. */
  readonly written?: number;
}

/**
 * Scenario 1: a backlog drained by 1, 10 and 50 consumers with no-op handlers. Every consumer
 * reads the whole backlog (N consumers = N × backlog deliveries).
 */
export async function catchUp(ctx: ScenarioContext): Promise<ScenarioResult> {
  const { config } = ctx;
  const { batchSize, concurrencyCap } = config.catchUp;
  const rows = new RowCollector('catch-up');
  const profiles: StatementProfile[] = [];

  const cases: { caseName: string; consumers: number; backlog: number; systems: SystemName[] }[] = [
    ...config.catchUp.cases.map(({ consumers, backlog }) => ({
      caseName: `${consumers} consumer${consumers > 1 ? 's' : ''}`,
      consumers,
      backlog,
      systems: [
        SYSTEMS.raw,
        SYSTEMS.minimal,
        SYSTEMS.sluice,
        ...(consumers === 1
          ? [
              SYSTEMS.sluiceNoCrash,
              SYSTEMS.sluiceOneSlot,
              SYSTEMS.sluiceLanes,
              SYSTEMS.emmett,
              SYSTEMS.graphile,
            ]
          : []),
      ],
    })),
    {
      caseName: PROJECTION_CASE,
      consumers: 1,
      backlog: config.catchUp.projectionBacklog,
      systems: [SYSTEMS.minimalWriting, SYSTEMS.sluiceTransactional],
    },
  ];

  for (const { caseName, consumers, backlog, systems } of cases) {
    const template = await sluiceTemplate(ctx, backlog);
    const peers = systems.includes(SYSTEMS.emmett);
    const emmettTpl = peers ? await emmettTemplate(ctx, config.catchUp.emmettBacklog) : '';
    const graphileTpl = peers ? await graphileTemplate(ctx, config.catchUp.graphileBacklog) : '';
    const concurrency = Math.min(consumers, concurrencyCap);

    for (let run = 0; run < config.runs; run++) {
      for (const system of rotate(systems, run)) {
        const size =
          system === SYSTEMS.emmett
            ? config.catchUp.emmettBacklog
            : system === SYSTEMS.graphile
              ? config.catchUp.graphileBacklog
              : backlog;
        const label = `${caseName}, ${size.toLocaleString('en')} events`;
        progress(`catch-up ${label}: ${system}, run ${run + 1}/${config.runs}`);
        const tpl =
          system === SYSTEMS.emmett ? emmettTpl : system === SYSTEMS.graphile ? graphileTpl : template;
        const db = await runDatabase(ctx, tpl, `catchup_${consumers}`, {
          deferDrop: system === SYSTEMS.emmett,
        });
        try {
          const outcome = await runOne(system, db, consumers, size, batchSize, concurrency);
          const m = outcome.measurement;
          const seconds = m.wallMs / 1000;
          const total = outcome.deliveries / seconds;
          // Per 100 events (Sluice may grow its batches while far behind; the baselines fetch batchSize).
          const batches = outcome.deliveries / 100;
          rows.add(
            caseName,
            system,
            [
              { name: 'total', unit: 'events/s', value: total },
              { name: 'per consumer', unit: 'events/s', value: total / consumers },
              { name: 'PostgreSQL CPU', unit: '% of a core', value: m.pgCpuPercent },
              { name: 'Node CPU', unit: '% of a core', value: m.nodeCpuPercent },
              {
                name: 'PostgreSQL CPU per event',
                unit: 'µs',
                value:
                  m.pgCpuPercent === undefined
                    ? undefined
                    : (m.pgCpuPercent * m.wallMs * 10) / outcome.deliveries,
              },
              {
                name: 'Node CPU per event',
                unit: 'µs',
                value: (m.nodeCpuPercent * m.wallMs * 10) / outcome.deliveries,
              },
              {
                name: 'statements sent per 100 events',
                unit: '',
                value: outcome.sent === undefined ? undefined : outcome.sent / batches,
              },
              {
                name: 'statements per 100 events (pg_stat_statements)',
                unit: '',
                value: m.statements === undefined ? undefined : m.statements / batches,
              },
              { name: 'write transactions per 100 events', unit: '', value: m.writeTransactions / batches },
              { name: 'WAL per event', unit: 'bytes', value: m.walBytes / outcome.deliveries },
              {
                name: 'first delivery after start',
                unit: 'ms',
                value:
                  outcome.tracker.firstDeliveryAt === 0
                    ? undefined
                    : outcome.tracker.firstDeliveryAt - m.startedAt,
              },
              { name: 'start() took', unit: 'ms', value: outcome.startMs },
              ...(outcome.sluice
                ? [
                    {
                      name: 'turn-start records per 100 events',
                      unit: '',
                      value: outcome.sluice.turnStarts / batches,
                    },
                  ]
                : []),
              ...(outcome.sluice && system === SYSTEMS.sluiceTransactional
                ? [
                    {
                      name: 'savepoints per 100 events',
                      unit: '',
                      value: outcome.sluice.savepoints / batches,
                    },
                  ]
                : []),
              { name: 'backlog', unit: 'events', value: size },
            ],
            {
              // Writing cases: an event delivered without its row in the table is lost too.
              lost: Math.max(
                outcome.tracker.lost(),
                outcome.written === undefined ? 0 : size * consumers - outcome.written,
              ),
              duplicated: outcome.tracker.duplicated(),
            },
          );
          if (!outcome.complete) progress(`  ! ${system} did not finish in time: counted as lost`);
          progress(
            `  ${formatRate(total)} events/s total, PostgreSQL ${fmt(m.pgCpuPercent)}% / Node ${fmt(m.nodeCpuPercent)}% of a core, ` +
              `${outcome.sent === undefined ? '?' : fmt(outcome.sent / batches)} statements sent per 100 events`,
          );
          if (
            ctx.pgStatStatements &&
            consumers === 1 &&
            run === config.runs - 1 &&
            (system === SYSTEMS.sluice || system === SYSTEMS.minimal || system === SYSTEMS.sluiceLanes)
          ) {
            profiles.push({
              label: `${system}, catch-up with 1 consumer (${size.toLocaleString('en')} events)`,
              per: '100 events',
              divisor: batches,
              rows: await statementProfile(ctx.admin, db.oid, 14),
            });
          }
        } finally {
          await db.drop();
        }
      }
    }
  }

  return {
    scenario: 'catch-up',
    title: `Catch-up: a backlog drained by 1, 10 and 50 consumers (no-op handlers), by one consumer run as ${CATCH_UP_LANES} lanes, and by one consumer writing one row per event`,
    rows: rows.rows(),
    profiles,
    notes: [
      `Every consumer reads the whole backlog (N consumers = N × backlog deliveries). Backlogs: ${config.catchUp.cases
        .map((c) => `${c.consumers} consumer(s): ${c.backlog.toLocaleString('en')} events`)
        .join(
          '; ',
        )}; the multi-consumer backlogs are smaller so the full run fits its time budget. Per consumer = total ÷ consumers.`,
      `Sluice: default options (batchSize ${DEFAULTS.batchSize}, maxBatchSize at its default, pollIntervalMs ${DEFAULTS.pollIntervalMs}, LISTEN on, countCrashedAttempts ${String(DEFAULTS.countCrashedAttempts)}) except ` +
        `concurrency = min(consumers, ${concurrencyCap}) with several consumers and its default (${DEFAULTS.concurrency}) with one; its pool has concurrency + 2 connections. ` +
        'One consumer still runs one turn at a time: the spare slots let it read its next batch ahead on another connection while a turn delivers and commits. The timed part starts at start() ' +
        '(rows pre-registered) and ends at the last delivery: events/s include start() itself ("start() took"), ' +
        'which weighs on the small backlogs of --quick (see "first delivery after start").',
      `Minimal loop and raw scan use min(consumers, ${concurrencyCap}) connections and LIMIT ${batchSize}, on the same events table.`,
      'Sluice, countCrashedAttempts: false is a diagnostic row: the same dispatcher that never writes the committed turn-start record (docs/design.md §4.7). ' +
        'With the default, a turn writes one only without a clean view of its consumer (its first turn in the process, after a failure, while isolating a crash, ' +
        'or when the row shows someone else wrote it): "turn-start records per 100 events" counts those it still wrote, and the row shows what they cost. ' +
        'Sluice, concurrency 1 is another: one turn slot and a pool of 3, so no read-ahead (every turn fetches for itself).',
      `${SYSTEMS.sluiceLanes}: the 1-consumer backlog drained by one consumer declared with lanes: ${CATCH_UP_LANES} (docs/design.md §11), ${CATCH_UP_LANES} turn slots and a pool of ${CATCH_UP_LANES + 2}, ` +
        `everything else at its defaults. Each lane reads the log above its cursor and keeps its own events (about one in ${CATCH_UP_LANES}; the others come back as their id alone), ` +
        `its batch counted in rows read (batchSize × ${CATCH_UP_LANES}): every lane reads the whole log once. The events are spread over 1,000 streams, a lane's by the hash of its stream id. ` +
        'Its PostgreSQL CPU per event is set against that of Sluice with one lane (the row "Sluice"), run by run.',
      `${PROJECTION_CASE} (${config.catchUp.projectionBacklog.toLocaleString('en')} events): each event writes one row into a projection table (bench.projection, keyed by the event id, empty at the start), ` +
        'with the same statement for both systems (an INSERT … ON CONFLICT DO NOTHING, idempotent as a handler must be), each awaited before the next event. ' +
        `Sluice: a transactional consumer (default options, concurrency ${DEFAULTS.concurrency}, as the 1-consumer case) whose handler writes through ctx.tx, inside the turn's transaction; ` +
        'its batch runs in one savepoint ("savepoints per 100 events", from the statements sent). ' +
        'Minimal loop: its transaction per batch (lock the cursor row, fetch, one INSERT per event, move the cursor, COMMIT) on one connection. ' +
        'An event whose row is missing from the table afterwards counts as lost.',
      `Emmett: postgreSQLEventStoreConsumer + one reactor, batchSize ${EMMETT_SETTINGS.batchSize}, pullingFrequencyInMs ${EMMETT_SETTINGS.pullingFrequencyInMs} (default 50), ` +
        `${config.catchUp.emmettBacklog.toLocaleString('en')} events appended through appendToStream (500 per stream). Its reactor stores a checkpoint per message.`,
      `graphile-worker: run() with concurrency ${GRAPHILE_SETTINGS.concurrency}, maxPoolSize ${GRAPHILE_SETTINGS.maxPoolSize}, localQueue.size ${GRAPHILE_SETTINGS.localQueue.size}, ` +
        `completeJobBatchDelay ${GRAPHILE_SETTINGS.completeJobBatchDelay}, failJobBatchDelay ${GRAPHILE_SETTINGS.failJobBatchDelay}; ` +
        `${config.catchUp.graphileBacklog.toLocaleString('en')} jobs queued with addJobs (1,000 per call) before the worker starts; one job per event (a queue has one consumer).`,
      'CPU: PostgreSQL = every server process (from /proc), Node = this process (process.cpuUsage), both as % of one core over the timed part. ' +
        'Statements sent = what postgres.js sent (its debug hook: every round trip, BEGIN and COMMIT included; Sluice, minimal loop, raw scan). ' +
        'pg_stat_statements calls in the run database are given for every system, but miss most COMMITs that postgres.js sends (compare the two). ' +
        'Write transactions = xids assigned in the cluster. First delivery after start: from the start of the timed part (Sluice: start(); peers: starting the consumer) to the first handler call.',
    ],
  };
}

/**
 * Sluice's turn slots: as many as the baselines' connections when there are several consumers; its
 * default for one consumer, which still runs one turn at a time and reads its next batch ahead on a
 * spare slot (the diagnostic row with one slot shows what that read-ahead brings).
 */
function sluiceConcurrency(system: SystemName, consumers: number, concurrency: number): number {
  if (system === SYSTEMS.sluiceOneSlot) return 1;
  if (system === SYSTEMS.sluiceLanes) return CATCH_UP_LANES;
  return consumers === 1 ? Math.max(concurrency, DEFAULTS.concurrency) : concurrency;
}

async function runOne(
  system: SystemName,
  db: RunDatabase,
  consumers: number,
  backlog: number,
  batchSize: number,
  concurrency: number,
): Promise<RunOutcome> {
  const tracker = new DeliveryTracker(consumers, backlog);
  const deliveries = consumers * backlog;
  // Generous: a system slower than 300 deliveries/s is reported as not finishing.
  const timeoutMs = Math.max(60_000, (deliveries / 300) * 1000);
  const meter = db.meter();
  const names = Array.from({ length: consumers }, (_, i) => consumerName(i));
  // Counts what postgres.js sends (pg_stat_statements does not see every COMMIT it sends), and
  // among Sluice's statements its turn-start records and savepoints.
  const sent = { counting: false, count: 0, turnStarts: 0, savepoints: 0 };
  const debug = (_connection: number, text: string) => {
    if (!sent.counting) return;
    sent.count++;
    const kind = sluiceStatement(text);
    if (kind === 'turn start') sent.turnStarts++;
    else if (kind === 'savepoint') sent.savepoints++;
  };
  const startCounting = async () => {
    sent.count = 0;
    sent.turnStarts = 0;
    sent.savepoints = 0;
    sent.counting = true;
    await meter.start();
  };
  const stopCounting = async () => {
    sent.counting = false;
    return meter.stop();
  };

  switch (system) {
    case SYSTEMS.raw: {
      const sql = pool(db.url, concurrency, { debug });
      try {
        await sql`select 1`;
        await startCounting();
        await drainRawScan(sql, consumers, batchSize, (c, row) => {
          tracker.record(c, row.data.seq);
        });
        const measurement = await stopCounting();
        return { measurement, tracker, complete: true, deliveries, sent: sent.count };
      } finally {
        await sql.end();
      }
    }
    case SYSTEMS.minimal: {
      const sql = pool(db.url, concurrency, { debug });
      try {
        await registerCursors(sql, names);
        await startCounting();
        await drainMinimal(sql, names, batchSize, (c, row) => {
          tracker.record(c, row.data.seq);
        });
        const measurement = await stopCounting();
        return { measurement, tracker, complete: true, deliveries, sent: sent.count };
      } finally {
        await sql.end();
      }
    }
    case SYSTEMS.minimalWriting: {
      const sql = pool(db.url, concurrency, { debug });
      try {
        await registerCursors(sql, names);
        await createProjection(sql);
        await startCounting();
        await drainMinimal(sql, names, batchSize, (c, row, tx) => {
          tracker.record(c, row.data.seq);
          return projectRow(tx, row.id, row.data);
        });
        const measurement = await stopCounting();
        const written = await projectedRows(sql);
        return { measurement, tracker, complete: true, deliveries, sent: sent.count, written };
      } finally {
        await sql.end();
      }
    }
    case SYSTEMS.sluice:
    case SYSTEMS.sluiceNoCrash:
    case SYSTEMS.sluiceOneSlot:
    case SYSTEMS.sluiceLanes:
    case SYSTEMS.sluiceTransactional: {
      const turns = sluiceConcurrency(system, consumers, concurrency);
      const sql = pool(db.url, turns + 2, { debug });
      const writing = system === SYSTEMS.sluiceTransactional;
      // Sluice's own defaults (batch size and any batch growth included); the diagnostic rows turn
      // off the crash record, or run one turn slot; the lanes row runs the consumer as 32 lanes,
      // a turn slot each.
      const dispatcher = benchDispatcher(
        sql,
        writing
          ? projectingConsumers(tracker)
          : trackingConsumers(
              consumers,
              tracker,
              system === SYSTEMS.sluiceLanes ? { lanes: CATCH_UP_LANES } : {},
            ),
        {
          concurrency: turns,
          ...(system === SYSTEMS.sluiceNoCrash ? { countCrashedAttempts: false } : {}),
        },
      );
      // The writing case ends when the last row is committed, not when its handler ran: watched on a
      // connection of its own (not counted), once every event was handed to the handler.
      const watch = writing ? pool(db.url, 1) : undefined;
      try {
        if (writing) await createProjection(sql);
        if (watch) await watch`select 1`;
        await dispatcher.ensureRegistered();
        await startCounting();
        const startedAt = performance.now();
        await dispatcher.start();
        const startMs = performance.now() - startedAt;
        let complete = await tracker.whenComplete(timeoutMs);
        if (watch && complete) complete = await cursorReached(watch, consumerName(0), backlog, timeoutMs);
        const measurement = await stopCounting();
        return {
          measurement,
          tracker,
          complete,
          deliveries,
          sent: sent.count,
          startMs,
          sluice: { turnStarts: sent.turnStarts, savepoints: sent.savepoints },
          ...(writing ? { written: await projectedRows(sql) } : {}),
        };
      } finally {
        await dispatcher.stop();
        await watch?.end();
        await sql.end();
      }
    }
    case SYSTEMS.emmett: {
      const runner = emmettConsumer(db.url, (seq) => {
        tracker.record(0, seq);
      });
      try {
        await meter.start();
        runner.start();
        const complete = await tracker.whenComplete(timeoutMs);
        const measurement = await meter.stop();
        return { measurement, tracker, complete, deliveries, sent: undefined };
      } finally {
        await runner.close();
      }
    }
    case SYSTEMS.graphile: {
      await meter.start();
      const runner = await graphileWorker(db.url, (seq) => {
        tracker.record(0, seq);
      });
      try {
        const complete = await tracker.whenComplete(timeoutMs);
        const measurement = await meter.stop();
        return { measurement, tracker, complete, deliveries, sent: undefined };
      } finally {
        await runner.stop();
      }
    }
  }
}

function fmt(value: number | undefined): string {
  return value === undefined ? '?' : value.toFixed(value >= 10 ? 0 : 1);
}

function formatRate(value: number): string {
  return Math.round(value).toLocaleString('en');
}

/**
 * The consumer of the writing case: transactional, its handler writes the event's row through the
 * turn's transaction (ctx.tx), the statement the minimal loop writes it with.
 */
function projectingConsumers(tracker: DeliveryTracker): Consumer[] {
  return [
    {
      name: consumerName(0),
      transactional: true,
      handler: (event, context) => {
        const data = event.data as { seq: number; orderId: string; totalCents: number };
        tracker.record(0, data.seq);
        if (!context.tx) throw new Error('a transactional consumer is given ctx.tx');
        return projectRow(context.tx, event.id.toString(), data);
      },
    },
  ];
}

/**
 * Waits until the consumer's committed cursor is at `id` or beyond (checked every millisecond):
 * the events up to it, and whatever their handler wrote in the same transaction, are committed.
 * False after `timeoutMs`.
 */
async function cursorReached(
  sql: postgres.Sql,
  name: string,
  id: number,
  timeoutMs: number,
): Promise<boolean> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const [row] = await sql<{ reached: boolean }[]>`
      select cursor >= ${id} as reached from sluice.consumers where name = ${name}`;
    if (row?.reached === true) return true;
    if (performance.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
}

import { append, DEFAULTS, pgArray, transaction } from '@sluice/core';
import { EVENT_TYPE, payload, streamOf } from '../harness/payload.js';
import { GcPauses, YoungGeneration } from '../harness/gc.js';
import { RemoteDispatcher, type RemoteOutcome } from '../harness/remote-dispatcher.js';
import { progress } from '../harness/progress.js';
import { firstBetween, StatementLog, StepTimes } from '../harness/statement-steps.js';
import { percentile } from '../harness/stats.js';
import { emptyEmmettTemplate, emptyGraphileTemplate } from '../harness/peer-templates.js';
import { emptySluiceTemplate } from '../harness/templates.js';
import { DeliveryTracker } from '../harness/tracker.js';
import { LATENCY_SYSTEMS } from '../names.js';
import { RowCollector, type ScenarioResult } from '../report/types.js';
import { minimalListener, registerCursors } from '../systems/baselines.js';
import {
  EMMETT_SETTINGS,
  emmettConsumer,
  emmettStore,
  GRAPHILE_SETTINGS,
  graphileUtils,
  graphileWorker,
} from '../systems/peers.js';
import { benchConsumers, benchDispatcher, consumerName, pool } from '../systems/sluice.js';
import { rotate, runDatabase, sleep, type RunDatabase, type ScenarioContext } from './context.js';

type LatencySystem = (typeof LATENCY_SYSTEMS)[keyof typeof LATENCY_SYSTEMS];

const MINIMAL_CHANNEL = 'bench_minimal';

/** What WorkerUtils.addJob sends (graphile-worker 0.17.3, helpers.js), its optional arguments left at their defaults. */
const GRAPHILE_ADD_JOB = 'select * from graphile_worker.add_job(identifier => $1::text, payload => $2::json)';

interface System {
  /** Starts the consumer side; returns its stop function. */
  start(onSeq: (seq: number) => void): Promise<() => Promise<void>>;
  /**
   * Appends event `seq` from another connection; resolves with the moment (performance.now()) its
   * transaction's COMMIT returned.
   */
  append(seq: number): Promise<number>;
  close(): Promise<void>;
  /**
   * Diagnostic, Sluice from another pool with each statement timed: when an event's path reached
   * each point of {@link SLUICE_STEPS} (the append call first, the handler last), given when its
   * append was called, when it returned and when its handler ran; undefined unless it took every step.
   */
  path?(startedAt: number, committedAt: number, handledAt: number): number[] | undefined;
  /**
   * The dispatcher runs in another process (started by start()): the handler times, the deliveries
   * and that process's allocation come from it once the run is finished.
   */
  remote?: {
    /** The measured window starts. */
    measure(): void;
    finish(timeoutMs: number): Promise<RemoteOutcome>;
  };
}

/** The steps from an append call to its handler, Sluice from another pool. */
const SLUICE_STEPS = [
  { label: 'append called → COMMIT sent: BEGIN, then the INSERT' },
  {
    label:
      'COMMIT sent → NOTIFY sent: the commit and its WAL flush (transaction() sends the NOTIFY once COMMIT is answered)',
  },
  { label: 'NOTIFY sent → pre-check sent: the NOTIFY and its delivery to the LISTEN connection' },
  { label: 'pre-check sent → BEGIN sent: the pre-check (every NOTIFY leads to one)' },
  { label: 'BEGIN sent → lock sent: BEGIN' },
  { label: 'lock sent → turn start sent: the lock, with the early fetch behind it' },
  { label: 'turn start sent → handler: the committed turn-start record (crash accounting)' },
] as const;

/**
 * Each statement log's room, per event appended: an event costs about eight statements on the
 * dispatcher's pool and four on the appender's; the rest leaves room for poll ticks and retries.
 */
const LOG_PER_EVENT = 24;

/** Connections of the dispatcher's pool, in this process or another. */
const DISPATCHER_POOL = 6;

/**
 * Scenario 2: append→handler latency at a steady rate from another connection, one consumer.
 * Latency runs from just before the append call to the handler's first line (the append's own
 * commit is included); commit→handler starts when the append call has returned.
 */
export async function latency(ctx: ScenarioContext): Promise<ScenarioResult> {
  const { config } = ctx;
  const { perSecond, seconds, warmupSeconds } = config.latency;
  const rows = new RowCollector('latency');
  const sluiceTpl = await emptySluiceTemplate(ctx);
  const graphileTpl = await emptyGraphileTemplate(ctx);
  const emmettTpl = await emptyEmmettTemplate(ctx);
  const systems = Object.values(LATENCY_SYSTEMS);
  const warmup = Math.round(perSecond * warmupSeconds);
  const total = warmup + Math.round(perSecond * seconds);
  const steps = new StepTimes(SLUICE_STEPS);
  let stepsTimed = false;

  for (let run = 0; run < config.runs; run++) {
    for (const name of rotate(systems, run)) {
      progress(`latency: ${name}, run ${run + 1}/${config.runs} (${total} appends at ${perSecond}/s)`);
      const tpl =
        name === LATENCY_SYSTEMS.graphile
          ? graphileTpl
          : name === LATENCY_SYSTEMS.emmett
            ? emmettTpl
            : sluiceTpl;
      const db = await runDatabase(ctx, tpl, 'latency', { deferDrop: name === LATENCY_SYSTEMS.emmett });
      try {
        const system = await makeSystem(name, db, total);
        const tracker = new DeliveryTracker(1, total);
        const startedAt = new Float64Array(total);
        const committedAt = new Float64Array(total);
        const handledAt = new Float64Array(total);
        const stop = await system.start((seq) => {
          if (seq >= 0 && seq < total && handledAt[seq] === 0) handledAt[seq] = performance.now();
          tracker.record(0, seq);
        });
        let achieved = 0;
        const gc = new GcPauses();
        const young = new YoungGeneration();
        let heap = { allocatedBytes: 0, scavengedBytes: 0, survivedBytes: 0, survivedPercent: 0 };
        let remote: RemoteOutcome | undefined;
        try {
          await sleep(200); // LISTEN connected, first poll done
          const t0 = performance.now();
          gc.from = t0 + warmupSeconds * 1000;
          const interval = 1000 / perSecond;
          for (let seq = 0; seq < total; seq++) {
            const wait = t0 + seq * interval - performance.now();
            if (wait >= 1) await sleep(wait);
            if (seq === warmup) {
              young.start();
              system.remote?.measure();
            }
            startedAt[seq] = performance.now();
            committedAt[seq] = await system.append(seq);
          }
          achieved = (total * 1000) / (performance.now() - t0);
          gc.to = performance.now();
          heap = young.stop();
          if (system.remote) {
            remote = await system.remote.finish(5_000);
            handledAt.set(remote.handledAt);
          } else {
            await tracker.whenComplete(5_000);
          }
        } finally {
          gc.stop();
          young.stop(); // a no-op once the loop has stopped it
          await stop();
          await system.close();
        }
        const appendToHandler: number[] = [];
        const appendToCommit: number[] = [];
        const commitToHandler: number[] = [];
        for (let seq = warmup; seq < total; seq++) {
          appendToCommit.push((committedAt[seq] as number) - (startedAt[seq] as number));
          const handled = handledAt[seq] as number;
          if (handled === 0) continue;
          appendToHandler.push(handled - (startedAt[seq] as number));
          commitToHandler.push(handled - (committedAt[seq] as number));
          const points = system.path?.(startedAt[seq] as number, committedAt[seq] as number, handled);
          if (points) steps.add(points);
        }
        if (system.path) {
          steps.endRun(total - warmup);
          stepsTimed = true;
        }
        const p50 = percentile(appendToHandler, 50);
        const p99 = percentile(appendToHandler, 99);
        const max = percentile(appendToHandler, 100);
        // With the dispatcher in another process, the appender's process and the dispatcher's both
        // count: their allocation and GC pauses are added up, the longest pause is either's.
        const events = total - warmup;
        const windowSeconds = (gc.to - gc.from) / 1000;
        const gcMs = gc.totalMs + (remote?.heap.gcPauseMs ?? 0);
        const scavenged = heap.scavengedBytes + (remote?.heap.scavengedBytes ?? 0);
        const survived = heap.survivedBytes + (remote?.heap.survivedBytes ?? 0);
        rows.add(
          `${perSecond} appends/s`,
          name,
          [
            { name: 'p50', unit: 'ms', value: p50 },
            { name: 'p99', unit: 'ms', value: p99 },
            { name: 'max', unit: 'ms', value: max },
            { name: 'commit→handler p50', unit: 'ms', value: percentile(commitToHandler, 50) },
            { name: 'commit→handler p99', unit: 'ms', value: percentile(commitToHandler, 99) },
            { name: 'append→commit p50', unit: 'ms', value: percentile(appendToCommit, 50) },
            { name: 'appends/s achieved', unit: '', value: achieved },
            { name: 'GC pause', unit: 'ms/s', value: windowSeconds > 0 ? gcMs / windowSeconds : 0 },
            {
              name: 'longest GC pause',
              unit: 'ms',
              value: Math.max(gc.longest, remote?.heap.longestGcPauseMs ?? 0),
            },
            {
              name: 'allocated per event',
              unit: 'KiB',
              value: (heap.allocatedBytes + (remote?.heap.allocatedBytes ?? 0)) / 1024 / events,
            },
            ...(remote
              ? [
                  {
                    name: "of which the dispatcher's process",
                    unit: 'KiB',
                    value: remote.heap.allocatedBytes / 1024 / events,
                  },
                ]
              : []),
            {
              name: 'found alive by scavenges',
              unit: '%',
              value: scavenged > 0 ? (100 * survived) / scavenged : 0,
            },
            { name: 'samples', unit: '', value: appendToHandler.length },
          ],
          {
            lost: remote?.lost ?? tracker.lost(),
            duplicated: remote?.duplicated ?? tracker.duplicated(),
          },
        );
        progress(`  p50 ${p50.toFixed(2)} ms, p99 ${p99.toFixed(2)} ms, max ${max.toFixed(1)} ms`);
      } finally {
        await db.drop();
      }
    }
  }

  return {
    scenario: 'latency',
    title: `Latency: append→handler at ${perSecond} appends/s from another connection, one consumer`,
    rows: rows.rows(),
    profiles: [],
    notes: [
      `One appender sends ${perSecond} single-event transactions per second (paced by the clock) for ${seconds} s after a ${warmupSeconds} s warm-up that is not counted; ` +
        'the consumer runs in the same Node process unless the row says otherwise. append→handler: from just before the append call to the handler (the append commit included); ' +
        "commit→handler: from the moment the appending transaction's COMMIT returned (Sluice's transaction() returns then: its NOTIFY is sent without waiting for it); " +
        "append→commit: from just before the append call to that moment, the append's own share of append→handler.",
      `Sluice: default options (batchSize ${DEFAULTS.batchSize}, maxBatchSize at its default, pollIntervalMs ${DEFAULTS.pollIntervalMs}, countCrashedAttempts true), a pool of ${DISPATCHER_POOL}. ` +
        '"dispatcher in another process": the dispatcher runs in a Node process of its own (src/dispatcher-process.ts, only Sluice and postgres.js loaded), as a worker process beside the application that appends; ' +
        'the appender has its own postgres.js pool here, so the dispatcher is woken by the NOTIFY transaction() sends after the commit (at once unless 3 commits came in the 10 ms before, else ≤ 1 per 10 ms). ' +
        "Its handler notes the time on the machine's monotonic clock (process.hrtime: CLOCK_MONOTONIC, one clock for every process of the machine, which performance.now() reads too), sent back once the run is over. " +
        '"another pool of the same process": the same, with the dispatcher in the appender\'s process; "dispatcher pool": the appender uses the ' +
        "dispatcher's pool and wakes it directly (in-process wake-up, no NOTIFY); polling only: listen false and append(…, { wakeUp: 'none' }).",
      "allocated per event: what Node allocated in V8's young generation over the measured appends (appender and consumer together; V8's heap statistics before and after each GC), " +
        "divided by the events appended (each delivered once); with the dispatcher in another process, both processes' allocation added up (the dispatcher's alone in its own column), " +
        "and so are their GC pauses (the longest is either's). found alive by scavenges: the share of the young generation that scavenges found still reachable (copied, or promoted to the old generation); " +
        "a scavenge's pause grows with it, not with what died.",
      `Minimal loop: the catch-up baseline's transaction per batch, LISTENing on a channel; the appender INSERTs and NOTIFYs in its transaction; 100 ms poll as a safety net.`,
      `graphile-worker: same settings as in catch-up (concurrency ${GRAPHILE_SETTINGS.concurrency}, localQueue ${GRAPHILE_SETTINGS.localQueue.size}, completeJobBatchDelay ${GRAPHILE_SETTINGS.completeJobBatchDelay}); ` +
        'each job added as Sluice appends, in an explicit transaction on a client of its WorkerUtils pool (withPgClient): BEGIN, ' +
        '`select * from graphile_worker.add_job(identifier => $1, payload => $2)` (the statement addJob sends, which NOTIFYs inside the transaction), COMMIT; ' +
        'commit→handler = from the moment that COMMIT returned to the task start, append→handler = from just before the BEGIN.',
      `Emmett: same consumer settings as in catch-up (pullingFrequencyInMs ${EMMETT_SETTINGS.pullingFrequencyInMs}); its puller backs off up to 1 s whenever a batch is not full, ` +
        'which is every batch at this rate; events appended with appendToStream from another event store instance.',
      ...(stepsTimed
        ? [
            'Sluice from another pool, each statement timed: a diagnostic row that no target uses. It is the row "from another pool" with a postgres.js debug hook on both pools, ' +
              'which notes when each statement is written to its connection; with a debug hook set, postgres.js also captures a stack trace for every query it creates, ' +
              'so this row is slower and allocates more than the one it times. Below, the time of each step of its path, from the moment the statement that starts the step was sent ' +
              'to the moment the next one was sent, or the handler ran. The p50 and p99 of each step are taken over the events whose path took every step ' +
              '(the others shared a step with an earlier event: a NOTIFY sent once for several commits, or a turn begun before theirs that delivered them too), ' +
              'then the median (min–max) over the runs. The steps of one event add up to its append→handler; percentiles of the steps do not add up to a percentile of the whole.' +
              `\n\n${steps.table()}`,
          ]
        : []),
    ],
  };
}

/** What each statement of Sluice's path is, by its text (undefined: not one of the path's). */
function appenderStatement(text: string): 'commit' | 'notify' | undefined {
  if (text.trim() === 'commit') return 'commit';
  return text.includes('pg_notify(') ? 'notify' : undefined;
}

function dispatcherStatement(text: string): 'pre-check' | 'begin' | 'lock' | 'turn start' | undefined {
  if (text.startsWith('begin')) return 'begin';
  if (text.includes(' as quiet')) return 'pre-check';
  if (text.includes('for update of c skip locked')) return 'lock';
  if (text.includes('async_commit') && text.includes('turn_starts')) return 'turn start';
  return undefined;
}

async function makeSystem(name: LatencySystem, db: RunDatabase, total: number): Promise<System> {
  const logCapacity = total * LOG_PER_EVENT;
  switch (name) {
    case LATENCY_SYSTEMS.otherProcess: {
      const appenderSql = pool(db.url, 2);
      let dispatcher: RemoteDispatcher | undefined;
      const started = () => {
        if (!dispatcher) throw new Error('the dispatcher process is not started');
        return dispatcher;
      };
      return {
        async start() {
          const remote = await RemoteDispatcher.start({ url: db.url, total, poolSize: DISPATCHER_POOL });
          dispatcher = remote;
          return () => remote.stop();
        },
        async append(seq) {
          await transaction(appenderSql, (tx) =>
            append(tx, [{ streamId: streamOf(seq), type: EVENT_TYPE, data: payload(seq) }]),
          );
          return performance.now();
        },
        close: () => appenderSql.end(),
        remote: {
          measure() {
            started().measure();
          },
          finish: (timeoutMs) => started().finish(timeoutMs),
        },
      };
    }
    case LATENCY_SYSTEMS.otherPool:
    case LATENCY_SYSTEMS.otherPoolTimed:
    case LATENCY_SYSTEMS.inProcess:
    case LATENCY_SYSTEMS.polling: {
      const timed = name === LATENCY_SYSTEMS.otherPoolTimed;
      const dispatcherLog = new StatementLog(timed ? logCapacity : 0);
      const appenderLog = new StatementLog(timed ? logCapacity : 0);
      const dispatcherSql = pool(db.url, DISPATCHER_POOL, timed ? { debug: dispatcherLog.debug } : {});
      const appenderSql =
        name === LATENCY_SYSTEMS.inProcess
          ? dispatcherSql
          : pool(db.url, 2, timed ? { debug: appenderLog.debug } : {});
      const polling = name === LATENCY_SYSTEMS.polling;
      let kinds: { appender: Map<string, number[]>; dispatcher: Map<string, number[]> } | undefined;
      return {
        async start(onSeq) {
          const consumers = benchConsumers(1, (_consumer, seq) => {
            onSeq(seq);
          });
          const dispatcher = benchDispatcher(dispatcherSql, consumers, { listen: !polling });
          await dispatcher.start();
          return () => dispatcher.stop();
        },
        async append(seq) {
          const event = { streamId: streamOf(seq), type: EVENT_TYPE, data: payload(seq) };
          if (polling) await appenderSql.begin((tx) => append(tx, [event], { wakeUp: 'none' }));
          else await transaction(appenderSql, (tx) => append(tx, [event]));
          return performance.now();
        },
        async close() {
          if (appenderSql !== dispatcherSql) await appenderSql.end();
          await dispatcherSql.end();
        },
        ...(timed
          ? {
              path(startedAt: number, committedAt: number, handledAt: number): number[] | undefined {
                kinds ??= {
                  appender: appenderLog.byKind(appenderStatement),
                  dispatcher: dispatcherLog.byKind(dispatcherStatement),
                };
                const { appender, dispatcher } = kinds;
                const points = [startedAt];
                const next = (times: number[] | undefined, to: number) => {
                  const at = firstBetween(times, points[points.length - 1] as number, to);
                  if (at !== undefined) points.push(at);
                  return at !== undefined;
                };
                const complete =
                  next(appender.get('commit'), committedAt) &&
                  next(appender.get('notify'), handledAt) &&
                  next(dispatcher.get('pre-check'), handledAt) &&
                  next(dispatcher.get('begin'), handledAt) &&
                  next(dispatcher.get('lock'), handledAt) &&
                  next(dispatcher.get('turn start'), handledAt);
                if (!complete) return undefined;
                points.push(handledAt);
                return points;
              },
            }
          : {}),
      };
    }
    case LATENCY_SYSTEMS.minimal: {
      const consumerSql = pool(db.url, 3);
      const appenderSql = pool(db.url, 2);
      await registerCursors(consumerSql, [consumerName(0)]);
      return {
        async start(onSeq) {
          const loop = minimalListener(
            consumerSql,
            consumerName(0),
            DEFAULTS.batchSize,
            DEFAULTS.pollIntervalMs,
            (row) => {
              onSeq(row.data.seq);
            },
          );
          await loop.listen(MINIMAL_CHANNEL);
          loop.kick();
          return () => loop.stop();
        },
        async append(seq) {
          const data = JSON.stringify(payload(seq));
          await appenderSql.begin(async (tx) => {
            await tx`
              insert into sluice.events (stream_id, type, data)
              select u.s, u.t, u.d::jsonb from unnest(${pgArray([streamOf(seq)])}::text[], ${pgArray([EVENT_TYPE])}::text[], ${pgArray([data])}::text[]) as u(s, t, d)`;
            await tx`select pg_notify(${MINIMAL_CHANNEL}, '')`;
          });
          return performance.now();
        },
        async close() {
          await appenderSql.end();
          await consumerSql.end();
        },
      };
    }
    case LATENCY_SYSTEMS.graphile: {
      const { utils, close } = await graphileUtils(db.url);
      return {
        async start(onSeq) {
          const runner = await graphileWorker(db.url, onSeq);
          return () => runner.stop();
        },
        // addJob runs add_job in a transaction of its own, and returns after its commit plus the
        // parsing of the job row. As Sluice's append, the add runs in an explicit transaction of
        // ours, on graphile-worker's pool, and the clock starts when its COMMIT returns.
        append(seq) {
          return utils.withPgClient(async (client) => {
            await client.query('begin');
            await client.query(GRAPHILE_ADD_JOB, ['bench', JSON.stringify(payload(seq))]);
            await client.query('commit');
            return performance.now();
          });
        },
        close,
      };
    }
    case LATENCY_SYSTEMS.emmett: {
      const store = emmettStore(db.url);
      await store.schema.migrate();
      return {
        start(onSeq) {
          const runner = emmettConsumer(db.url, onSeq);
          runner.start();
          return Promise.resolve(() => runner.close());
        },
        async append(seq) {
          await store.appendToStream(streamOf(seq), [{ type: EVENT_TYPE, data: payload(seq) }]);
          return performance.now();
        },
        async close() {
          await store.close();
        },
      };
    }
  }
}

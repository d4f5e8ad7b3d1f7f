import { append, DEFAULTS, transaction } from '@sluice/core';
import { pgArray } from '@sluice/core/internal';
import { EVENT_TYPE, payload, streamOf } from '../harness/payload.js';
import { GcPauses, YoungGeneration } from '../harness/gc.js';
import { RemoteDispatcher, type RemoteOutcome } from '../harness/remote-dispatcher.js';
import { progress } from '../harness/progress.js';
import {
  firstBetween,
  sluiceStatement,
  StatementLog,
  StepTimes,
  type OptionalRun,
  type PathPoint,
} from '../harness/statement-steps.js';
import { formatNumber, percentile, summarize } from '../harness/stats.js';
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
   * Diagnostic, Sluice from another pool with each statement timed: the points of an event's path
   * (the append call first, the handler last, see {@link SLUICE_STEPS}), given when its append was
   * called, when it returned and when its handler ran; undefined unless the points every path
   * takes were found (the optional ones are in the path when it took them).
   */
  path?(startedAt: number, committedAt: number, handledAt: number): PathPoint<PathKind>[] | undefined;
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

/** The points of Sluice's path from an append call to its handler (statements by when they were sent). */
type PathKind = 'append' | 'commit' | 'notify' | 'pre-check' | 'begin' | 'lock' | 'turn start' | 'handler';

/**
 * The steps from an append call to its handler, Sluice from another pool. The pre-check and the
 * turn-start record are optional: a NOTIFY-woken pass skips the pre-check while the last full one
 * is at most a poll interval old and found every consumer plain, unless NOTIFYs kept waking passes
 * for nothing (docs/design.md §4.1); a turn records its start only without a clean view of its
 * consumer (docs/design.md §4.7). A path without one takes the step that spans it.
 */
const SLUICE_STEPS = [
  { from: 'append', to: 'commit', label: 'append called → COMMIT sent: BEGIN, then the INSERT' },
  {
    from: 'commit',
    to: 'notify',
    label:
      'COMMIT sent → NOTIFY sent: the commit and its WAL flush (transaction() sends the NOTIFY once COMMIT is answered)',
  },
  {
    from: 'notify',
    to: 'pre-check',
    label: 'NOTIFY sent → pre-check sent: the NOTIFY, its delivery to the LISTEN connection, the pass',
  },
  {
    from: 'pre-check',
    to: 'begin',
    label: 'pre-check sent → BEGIN sent: the idle pre-check, on the passes that took it',
  },
  {
    from: 'notify',
    to: 'begin',
    label:
      'NOTIFY sent → BEGIN sent, no pre-check: the NOTIFY, its delivery, a pass that skipped the pre-check',
  },
  { from: 'begin', to: 'lock', label: 'BEGIN sent → lock sent: BEGIN, until the lock goes out' },
  {
    from: 'lock',
    to: 'turn start',
    label: 'lock sent → turn start sent: the lock, with the early fetch behind it',
  },
  {
    from: 'turn start',
    to: 'handler',
    label: 'turn start sent → handler: the committed turn-start record, on the turns that wrote one',
  },
  {
    from: 'lock',
    to: 'handler',
    label: 'lock sent → handler, no turn-start record: the lock, with the early fetch behind it',
  },
] as const satisfies readonly { from: PathKind; to: PathKind; label: string }[];

/** The optional points, and the span each one falls in. */
const SLUICE_OPTIONAL = [
  { via: 'pre-check', from: 'notify', to: 'begin' },
  { via: 'turn start', from: 'lock', to: 'handler' },
] as const satisfies readonly { via: PathKind; from: PathKind; to: PathKind }[];

/**
 * Each statement log's room, per event appended: an event costs at most about eight statements on the
 * dispatcher's pool and four on the appender's; the rest leaves room for poll ticks and retries.
 */
const LOG_PER_EVENT = 24;

/** Connections of the dispatcher's pool, in this process or another. */
const DISPATCHER_POOL = 6;

/**
 * Scenario 2: append→handler latency at a steady rate from another connection, one consumer.
 * Latency runs from just before the append call to the handler's first line (the append's own
 * commit is included); commit→handler starts when the appending transaction's COMMIT returned.
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
  const steps = new StepTimes<PathKind>(SLUICE_STEPS, SLUICE_OPTIONAL);
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
          const path = system.path?.(startedAt[seq] as number, committedAt[seq] as number, handled);
          if (path) steps.add(path);
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
    title: `Latency: commit→handler and append→handler at ${perSecond} appends/s from another connection, one consumer`,
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
        "The row with wakeUp: 'in-transaction' is the same dispatcher process, with the appender's BEGIN, append(…, { wakeUp: 'in-transaction' }) and COMMIT: its NOTIFY is part of the appending transaction, as graphile-worker's is, and reaches the dispatcher with the commit (the append scenario measures what it costs the writers). " +
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
            'Sluice from another pool, each statement timed: a diagnostic row that no target uses. It is the row "from another pool of the same process" with a postgres.js debug hook on both pools, ' +
              'which notes when each statement is written to its connection; with a debug hook set, postgres.js also captures a stack trace for every query it creates, ' +
              'so this row is slower and allocates more than the one it times. Below, the time of each step of its path, from the moment the statement that starts the step was sent ' +
              'to the moment the next one was sent, or the handler ran. An event is timed when its path is found from the append call to the handler: its COMMIT, the NOTIFY sent after it, ' +
              'and the BEGIN and the lock of the turn that delivered it (the others shared a step with an earlier event: a NOTIFY sent once for several commits, or a turn begun before theirs that delivered them too). ' +
              'Two points are optional: the idle pre-check, which a NOTIFY-woken pass skips while the last full one is at most a poll interval old and found every consumer plain, ' +
              'unless NOTIFYs kept waking passes for nothing (docs/design.md §4.1), and the turn-start record, which a turn writes only without a clean view of its consumer (docs/design.md §4.7). ' +
              'A path that skipped one takes the step that spans it instead (NOTIFY sent → BEGIN sent, lock sent → handler). ' +
              '"events that took this step": the share of the timed events whose path has that step; its p50 and p99 are taken over them, ' +
              'then the median (min–max) over the runs. The steps of one event add up to its append→handler; percentiles of the steps do not add up to a percentile of the whole.' +
              `\n\n${steps.table()}\n\n${decisionsOnThePath(steps)}`,
          ]
        : []),
    ],
  };
}

/**
 * Which of the decisions of issue 28 moved which step of the timed path, from this run: the share
 * of the timed events whose path skipped each optional point, and the span it falls in with and
 * without it (medians over the runs).
 */
function decisionsOnThePath(steps: StepTimes<PathKind>): string {
  const median = (values: readonly number[]) => summarize(values).median;
  const ms = (value: number) => (Number.isFinite(value) ? `${formatNumber(value)} ms` : 'n/a');
  const optional = (via: PathKind, span: string, skippedBy: string) => {
    const runs: readonly OptionalRun[] = steps.optionalRuns(via);
    const skipped = median(runs.map((r) => (r.of > 0 ? (100 * (r.of - r.took)) / r.of : Number.NaN)));
    const without = ms(median(runs.map((r) => r.p50Without)));
    const withIt = ms(median(runs.map((r) => r.p50With)));
    const head = `${formatNumber(skipped)} % of the timed events (median over the runs) ${skippedBy}`;
    if (runs.every((r) => r.took === 0))
      return `${head}; ${span} p50 ${without} (no timed event's path took it)`;
    if (runs.every((r) => r.took === r.of))
      return `${head}; ${span} p50 ${withIt} (every timed event's path took it)`;
    return `${head}; ${span} p50 ${without} for them, ${withIt} for the events whose path took it`;
  };
  const beginToLock = median(steps.p50Of('begin', 'lock'));
  const pipelined = !Number.isFinite(beginToLock)
    ? ''
    : beginToLock < PIPELINED_MS
      ? `: the lock went out with BEGIN, without waiting for its answer (under ${PIPELINED_MS} ms apart)`
      : `: the lock waited for BEGIN's answer, a round trip (sent together, they go out under ${PIPELINED_MS} ms apart)`;
  return [
    'What the decisions of issue 28 changed on this path, in this run:',
    '',
    `- A NOTIFY-woken pass may skip the idle pre-check (decision 1, docs/design.md §4.1): ${optional('pre-check', 'NOTIFY sent → BEGIN sent', 'were delivered by a pass that skipped it')}.`,
    `- The turn-start record only without a clean view of the consumer (decision 3, docs/design.md §4.7): ${optional('turn start', 'lock sent → handler', 'were delivered by a turn that wrote none')}.`,
    `- BEGIN pipelined with the lock (decision 2): BEGIN sent → lock sent p50 ${ms(beginToLock)}${pipelined}.`,
    '- One savepoint per transactional batch (decision 4, docs/design.md §4.6): not on this path (this consumer is not transactional); ' +
      'the catch-up case "1 consumer, one row per event" counts its savepoints per 100 events.',
  ].join('\n');
}

/** BEGIN sent → lock sent below this (ms, p50): the two went out together, no round trip between them. */
const PIPELINED_MS = 0.05;

/**
 * What each of the appender's statements on Sluice's path is, by its text (undefined: not one of
 * the path's); the dispatcher's are told apart by sluiceStatement.
 */
function appenderStatement(text: string): 'commit' | 'notify' | undefined {
  if (text.trim() === 'commit') return 'commit';
  return text.includes('pg_notify(') ? 'notify' : undefined;
}

async function makeSystem(name: LatencySystem, db: RunDatabase, total: number): Promise<System> {
  const logCapacity = total * LOG_PER_EVENT;
  switch (name) {
    case LATENCY_SYSTEMS.otherProcess:
    case LATENCY_SYSTEMS.otherProcessInTx: {
      // The same dispatcher process; only how the appender wakes it differs: transaction()'s
      // NOTIFY once the COMMIT is answered, or a NOTIFY inside the appending transaction (as
      // graphile-worker and the minimal loop send theirs), which PostgreSQL delivers at the commit.
      const inTransaction = name === LATENCY_SYSTEMS.otherProcessInTx;
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
          const event = { streamId: streamOf(seq), type: EVENT_TYPE, data: payload(seq) };
          if (inTransaction)
            await appenderSql.begin((tx) => append(tx, [event], { wakeUp: 'in-transaction' }));
          else await transaction(appenderSql, (tx) => append(tx, [event]));
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
              path(startedAt: number, committedAt: number, handledAt: number) {
                kinds ??= {
                  appender: appenderLog.byKind(appenderStatement),
                  dispatcher: dispatcherLog.byKind(sluiceStatement),
                };
                const { appender, dispatcher } = kinds;
                // Every path: the event's COMMIT, the NOTIFY sent after it, the BEGIN and the lock of
                // the turn that delivered it (a turn begun before the NOTIFY delivered it, if at all,
                // before that NOTIFY's turn began: then no BEGIN is found before the handler).
                const commit = firstBetween(appender.get('commit'), startedAt, committedAt);
                if (commit === undefined) return undefined;
                const notify = firstBetween(appender.get('notify'), commit, handledAt);
                if (notify === undefined) return undefined;
                const begin = firstBetween(dispatcher.get('begin'), notify, handledAt);
                if (begin === undefined) return undefined;
                const lock = firstBetween(dispatcher.get('lock'), begin, handledAt);
                if (lock === undefined) return undefined;
                // The optional points, where the path took them.
                const precheck = firstBetween(dispatcher.get('pre-check'), notify, begin);
                const turnStart = firstBetween(dispatcher.get('turn start'), lock, handledAt);
                const path: PathPoint<PathKind>[] = [
                  { kind: 'append', at: startedAt },
                  { kind: 'commit', at: commit },
                  { kind: 'notify', at: notify },
                ];
                if (precheck !== undefined) path.push({ kind: 'pre-check', at: precheck });
                path.push({ kind: 'begin', at: begin }, { kind: 'lock', at: lock });
                if (turnStart !== undefined) path.push({ kind: 'turn start', at: turnStart });
                path.push({ kind: 'handler', at: handledAt });
                return path;
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

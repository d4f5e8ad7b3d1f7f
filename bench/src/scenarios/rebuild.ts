import { append, DEFAULTS, liveVersion, transaction } from '@sluice/core';
import { ADMIN_DEFAULTS, APPROVE_WITHIN_DEFAULT, beginTakeover, tables } from '@sluice/core/internal';
import type postgres from 'postgres';
import type { Measurement } from '../harness/counters.js';
import { EVENT_TYPE, payload, streamOf } from '../harness/payload.js';
import { progress } from '../harness/progress.js';
import {
  RebuildDispatcher,
  type RebuildOutcome,
  type RebuildProcessWindow,
} from '../harness/rebuild-dispatcher.js';
import { percentile } from '../harness/stats.js';
import { rebuildTemplate } from '../harness/templates.js';
import { REBUILD_SYSTEMS } from '../names.js';
import { RowCollector, type ScenarioResult } from '../report/types.js';
import { pool, STATS_CONSUMER, statsTable } from '../systems/sluice.js';
import { runDatabase, sleep, type RunDatabase, type ScenarioContext } from './context.js';

/** Connections of the dispatcher process's pool: its default concurrency (turn slots) + 2, as in latency. */
const DISPATCHER_POOL = DEFAULTS.concurrency + 2;

/** How often the scenario looks whether version 2 has caught up with version 1 (a connection of its own). */
const WATCH_MS = 50;

/** The schema Sluice runs in (its default). */
const SCHEMA = 'sluice';

/** Who approves the takeover, in the audit. */
const ACTOR = 'bench';

/** Version 1's delivery latency over one phase's measured appends. */
interface Latencies {
  readonly commitToHandler: number[];
  readonly appendToHandler: number[];
  readonly appendToCommit: number[];
  /** Appends measured, and those whose handler time is missing. */
  readonly appended: number;
  readonly unhandled: number;
}

/** The appends of one phase: paced by the clock, from the scenario's process (another than the dispatcher's). */
class PacedAppends {
  readonly startedAt: Float64Array;
  readonly committedAt: Float64Array;
  /** Appends done. */
  count = 0;
  t0 = 0;
  endedAt = 0;
  readonly #sql: postgres.Sql;
  readonly #seqFrom: number;
  readonly #interval: number;

  constructor(sql: postgres.Sql, seqFrom: number, capacity: number, perSecond: number) {
    this.#sql = sql;
    this.#seqFrom = seqFrom;
    this.#interval = 1000 / perSecond;
    this.startedAt = new Float64Array(capacity);
    this.committedAt = new Float64Array(capacity);
  }

  /**
   * Appends one event every 1/perSecond s (the latency scenario's pacing and statement: one event
   * per transaction(), its NOTIFY sent after the commit) until `stop()` says so or the capacity is
   * used up. `onAppend(i)` runs before append i.
   */
  async run(stop: () => boolean, onAppend: (i: number) => Promise<void> | void = () => undefined) {
    this.t0 = performance.now();
    const capacity = this.startedAt.length;
    for (let i = 0; i < capacity && !stop(); i++) {
      const wait = this.t0 + i * this.#interval - performance.now();
      if (wait >= 1) await sleep(wait);
      if (stop()) break;
      await onAppend(i);
      const seq = this.#seqFrom + i;
      this.startedAt[i] = performance.now();
      await transaction(this.#sql, (tx) =>
        append(tx, [{ streamId: streamOf(seq), type: EVENT_TYPE, data: payload(seq) }]),
      );
      this.committedAt[i] = performance.now();
      this.count = i + 1;
    }
    this.endedAt = performance.now();
  }

  /** Appends per second achieved from the first append to the last. */
  achieved(): number {
    return (this.count * 1000) / Math.max(1, this.endedAt - this.t0);
  }

  latencies(handledAt: Float64Array, from: number): Latencies {
    const commitToHandler: number[] = [];
    const appendToHandler: number[] = [];
    const appendToCommit: number[] = [];
    let unhandled = 0;
    for (let i = from; i < this.count; i++) {
      const started = this.startedAt[i] as number;
      const committed = this.committedAt[i] as number;
      appendToCommit.push(committed - started);
      const handled = handledAt[i] ?? 0;
      if (handled === 0) {
        unhandled++;
        continue;
      }
      commitToHandler.push(handled - committed);
      appendToHandler.push(handled - started);
    }
    return {
      commitToHandler,
      appendToHandler,
      appendToCommit,
      appended: Math.max(0, this.count - from),
      unhandled,
    };
  }
}

/** The figures of version 1's latency in one phase. */
function latencyFigures(
  l: Latencies,
  achieved: number,
  m: Measurement | undefined,
  w: RebuildProcessWindow | undefined,
): { name: string; unit: string; value: number | undefined }[] {
  return [
    { name: 'commit→handler p99', unit: 'ms', value: percentile(l.commitToHandler, 99) },
    { name: 'commit→handler p50', unit: 'ms', value: percentile(l.commitToHandler, 50) },
    { name: 'commit→handler max', unit: 'ms', value: percentile(l.commitToHandler, 100) },
    { name: 'append→handler p50', unit: 'ms', value: percentile(l.appendToHandler, 50) },
    { name: 'append→handler p99', unit: 'ms', value: percentile(l.appendToHandler, 99) },
    { name: 'append→commit p50', unit: 'ms', value: percentile(l.appendToCommit, 50) },
    { name: 'append→commit p99', unit: 'ms', value: percentile(l.appendToCommit, 99) },
    { name: 'appends/s achieved', unit: '', value: achieved },
    ...cpuFigures(m, w),
    {
      name: 'GC pause, dispatcher process',
      unit: 'ms/s',
      value: w && w.wallMs > 0 ? (1000 * w.gcPauseMs) / w.wallMs : undefined,
    },
    { name: 'longest GC pause, dispatcher process', unit: 'ms', value: w?.longestGcPauseMs },
    { name: 'samples', unit: '', value: l.commitToHandler.length },
  ];
}

function cpuFigures(
  m: Measurement | undefined,
  w: RebuildProcessWindow | undefined,
): { name: string; unit: string; value: number | undefined }[] {
  return [
    { name: 'PostgreSQL CPU', unit: '% of a core', value: m?.pgCpuPercent },
    {
      name: 'Node CPU, dispatcher process',
      unit: '% of a core',
      value: w && w.wallMs > 0 ? (100 * w.cpuMs) / w.wallMs : undefined,
    },
  ];
}

/**
 * The cursors of version 1's row and version 2's, read in one statement. Version 2 has caught up
 * once its cursor is at version 1's or beyond: it has every event the serving version has.
 */
async function cursors(sql: postgres.Sql): Promise<{ v1: number; v2: number }> {
  const [row] = await sql<{ v1: string | null; v2: string | null }[]>`
    select (select cursor from sluice.consumers where name = ${STATS_CONSUMER} and instance_id = '*')::text as v1,
           (select cursor from sluice.consumers where name = ${`${STATS_CONSUMER}@v2`} and instance_id = '*')::text as v2`;
  return { v1: Number(row?.v1 ?? 0), v2: Number(row?.v2 ?? 0) };
}

/** Events of the log without their row in `version`'s table, and rows for no event (after a phase, nothing in flight). */
async function projectionCheck(
  sql: postgres.Sql,
  version: number,
): Promise<{ missing: number; spurious: number }> {
  const table = sql(statsTable(version));
  const [row] = await sql<{ missing: number; spurious: number }[]>`
    select (select count(*) from sluice.events e
            where not exists (select 1 from ${table} p where p.event_id = e.id))::int as missing,
           (select count(*) from ${table} p
            where not exists (select 1 from sluice.events e where e.id = p.event_id))::int as spurious`;
  return { missing: row?.missing ?? 0, spurious: row?.spurious ?? 0 };
}

/** Where version 2 is rebuilt, and the rows of the phase that rebuilds it there. */
interface Deployment {
  /**
   * true: in a process of its own declaring version 2 alone, beside a serving process declaring
   * version 1 alone (docs/operating.md, "Rebuilds"); false:
   * in the serving process, which declares versions 1 and 2 (a deployment that brings version 2).
   */
  readonly separate: boolean;
  /** The rows: version 1 serving while version 2 rebuilds, and the rebuild. */
  readonly during: string;
  readonly rebuild: string;
  /** Where the rebuild runs, for the progress lines. */
  readonly where: string;
}

/** The rebuild phases of each run, in this order (the documented deployment first, next to phase A). */
const DEPLOYMENTS: readonly Deployment[] = [
  {
    separate: true,
    during: REBUILD_SYSTEMS.duringSeparate,
    rebuild: REBUILD_SYSTEMS.rebuildSeparate,
    where: 'in a process of its own',
  },
  {
    separate: false,
    during: REBUILD_SYSTEMS.during,
    rebuild: REBUILD_SYSTEMS.rebuild,
    where: "in the serving version's process",
  },
];

/** What a phase is given: its own database (a clone of the template), an appender's pool and a watcher's connection. */
interface PhaseDatabase {
  readonly db: RunDatabase;
  readonly appenderSql: postgres.Sql;
  readonly watchSql: postgres.Sql;
}

/** Runs `phase` on a fresh clone of `template` (version 1 live and caught up on its log), dropped after. */
async function onClone(
  ctx: ScenarioContext,
  template: string,
  phase: (on: PhaseDatabase) => Promise<void>,
): Promise<void> {
  const db = await runDatabase(ctx, template, 'rebuild');
  const appenderSql = pool(db.url, 2);
  const watchSql = pool(db.url, 1);
  try {
    await watchSql`select 1`;
    await phase({ db, appenderSql, watchSql });
  } finally {
    await appenderSql.end();
    await watchSql.end();
    await db.drop();
  }
}

/**
 * Scenario 7: a new version of a projection rebuilt beside the live one while appends go on.
 * Version 1 of a transactional projection writing one row per event (through ctx.tx) is live and
 * caught up on a log of `events` events; each phase of a run starts from a fresh clone of it.
 * Phase A: a dispatcher process declaring version 1 alone serves a steady append load (the latency
 * scenario's rate); version 1's commit→handler latency is measured. Phase C: a process declaring
 * version 1 alone serves the same load while a process of its own declaring version 2 alone
 * rebuilds it from the beginning of the log into its own table (the deployment docs/operating.md
 * recommends). Phase B: one process declares versions 1 and 2 (a deployment bringing version 2 to
 * the serving process) and rebuilds version 2 while version 1 serves. In C and B, version 1's
 * latency is measured until version 2 has caught up with it, and version 2's rate; the takeover is
 * then approved (beginTakeover, as the admin API approves it), and both tables are checked against
 * the log.
 */
export async function rebuild(ctx: ScenarioContext): Promise<ScenarioResult> {
  const { config } = ctx;
  const { events, seconds, warmupSeconds } = config.rebuild;
  const runs = config.rebuild.runs ?? config.runs;
  const perSecond = config.latency.perSecond;
  const warmup = Math.round(perSecond * warmupSeconds);
  const aloneTotal = warmup + Math.round(perSecond * seconds);
  // A rebuild slower than 1,000 events/s (or a minute, for the small logs) is reported as not done.
  const rebuildTimeoutMs = Math.max(60_000, events);
  const rows = new RowCollector('rebuild');
  const caseName = `${events.toLocaleString('en')} events, one row per event`;
  const template = await rebuildTemplate(ctx, events);
  // Every phase appends after the template's log: seq events, events + 1, …
  const seqFrom = events;

  for (let run = 0; run < runs; run++) {
    progress(`rebuild: run ${run + 1}/${runs}, version 1 alone (${aloneTotal} appends at ${perSecond}/s)`);
    await onClone(ctx, template, (on) =>
      phaseAlone(on, seqFrom, aloneTotal, warmup, perSecond, rows, caseName),
    );
    for (const deployment of DEPLOYMENTS) {
      progress(
        `rebuild: run ${run + 1}/${runs}, version 2 rebuilding ${events.toLocaleString('en')}+ events ${deployment.where} while version 1 serves`,
      );
      await onClone(ctx, template, (on) =>
        phaseRebuild(on, deployment, seqFrom, warmup, perSecond, rebuildTimeoutMs, rows, caseName),
      );
    }
  }

  const runsNote =
    runs === config.runs
      ? ''
      : ` (${runs} runs, not ${config.runs}: each rebuilds the whole log twice${runs === 2 ? '; the median of two is their mean' : ''})`;
  return {
    scenario: 'rebuild',
    title: `Rebuild: version 2 of a projection writing one row per event rebuilt from a ${events.toLocaleString('en')}-event log, in a process of its own and in the serving process, while version 1 serves ${perSecond} appends/s`,
    rows: rows.rows(),
    profiles: [],
    notes: [
      `Each run${runsNote} has three phases, each on a fresh clone of a template holding ${events.toLocaleString('en')} events of ~1 KB and version 1 of a transactional projection ("${STATS_CONSUMER}", declared with version: 1) live and caught up on them: ` +
        `its row registered at the head (startFrom 'now', by a dispatcher declaring it), its table (${statsTable(1)}, event id, order id, total; keyed by the event id) holding the row its handler writes for every event, filled in SQL when the template was built. ` +
        `Each version's handler writes one row per event into its own table (${statsTable(1)}, ${statsTable(2)}: the table of ctx.version) through ctx.tx, inside the turn's transaction, ` +
        "with the catch-up case's statement (INSERT … ON CONFLICT DO NOTHING). The phases run in the order A, C, B.",
      `Every dispatcher runs in a Node process of its own (src/rebuild-process.ts, only Sluice and postgres.js loaded), started for its phase; ` +
        `one appender in the scenario's process sends ${perSecond} single-event transactions per second, paced by the clock (the latency scenario's load and statement: transaction() + append(), its NOTIFY after the commit); ` +
        `the first ${warmupSeconds} s of appends of each phase are not counted. ` +
        `Phase A, version 1 alone: one process declares version 1; the appends go on for ${seconds} s after the warm-up. ` +
        'Phase C, the rebuild in a process of its own (the deployment docs/operating.md recommends): one process declares version 1 alone and serves the load, ' +
        "then a second process declares version 2 alone: its registration starts the rebuild, version 2's rows starting at the beginning of the log (stats@v2). " +
        'Phase B, the rebuild in the serving process: one process declares versions 1 and 2 (a deployment that brings version 2): its registration starts the rebuild while version 1 serves the load from the same process. ' +
        `In C and B the appends go on until version 2 has caught up with version 1 (its cursor at version 1's or beyond, looked at every ${WATCH_MS} ms on a connection of its own), ` +
        "so version 1's latency is measured over the whole rebuild.",
      "Latency is version 1's, noted in the process that declares it, as in the latency scenario's row with the dispatcher in another process: commit→handler from the moment the appending transaction's COMMIT returned to its handler's first line " +
        "(noted on the machine's monotonic clock in the dispatcher's process), append→handler from just before the append call, append→commit the append's own share. " +
        `Sluice runs at its default options (batchSize ${DEFAULTS.batchSize}, maxBatchSize at its default, concurrency ${DEFAULTS.concurrency}, pollIntervalMs ${DEFAULTS.pollIntervalMs}), a pool of ${DISPATCHER_POOL} in each process: ` +
        "in phase B both versions' turns share the process's turn slots, its pool and its event loop; in phase C each process has its own. In every phase they share PostgreSQL's cores with the appender.",
      "The rebuild's rate: the events version 2 went through (its cursor when it caught up) divided by the time from the start() of the dispatcher declaring version 2 (its registration starts the rebuild) to that moment; " +
        'its duration is that time. Then the appends stop, version 1 delivers the last of them, and the takeover is approved as an operator approves it through the admin API ' +
        `(beginTakeover from @sluice/core/internal, within ${APPROVE_WITHIN_DEFAULT.toLocaleString('en')} events of the head, lock timeout ${ADMIN_DEFAULTS.lockTimeoutMs} ms): ` +
        'version 1 stops at the barrier and a dispatcher declaring the consumer makes version 2 live once it has reached it (in phase C, either process may); "takeover took" runs from the approval to liveVersion() reading 2. ' +
        "Each process then waits for what it declares: version 1 for the last append, version 2 for every event of the log (in phase C, version 2's process serves the appends made after the catch-up).",
      "CPU: PostgreSQL = every server process (from /proc), as % of one core over each phase's measured window (phase A: its measured appends; C and B: from the start() of the dispatcher declaring version 2, " +
        "once it has returned, to the catch-up, the same window for version 1's row and the rebuild's); Node = one dispatcher process alone (process.cpuUsage, read there), over the same window, and its GC pauses: " +
        "the serving process in version 1's rows, the process declaring version 2 in the rebuild's rows (in phase B the same process for both). " +
        "The appender's process is not counted. WAL per rebuilt event: all the WAL the cluster wrote over the window (the appends and version 1's rows included) ÷ the events version 2 went through.",
      "Integrity: version 1's rows count its handler calls for the appended events (lost: never called; duplicated: called again, or called for an event it had before the phase) " +
        `and, after each phase, every event of the log without its row in ${statsTable(1)} (version 1 stops at the takeover's barrier, after the last append); ` +
        `version 2's rows count its handler calls for every event of the log and, once it is live, every committed event without its row in ${statsTable(2)} (lost) and rows for no event (duplicated).`,
    ],
  };
}

/** Version 1's deliveries in a process that declares it. */
function servingVersion(outcome: RebuildOutcome): NonNullable<RebuildOutcome['v1']> {
  if (!outcome.v1) throw new Error('the serving dispatcher process reported no version 1');
  return outcome.v1;
}

async function phaseAlone(
  { db, appenderSql, watchSql }: PhaseDatabase,
  seqFrom: number,
  total: number,
  warmup: number,
  perSecond: number,
  rows: RowCollector,
  caseName: string,
): Promise<void> {
  const dispatcher = await RebuildDispatcher.start({
    url: db.url,
    poolSize: DISPATCHER_POOL,
    versions: [1],
    seqFrom,
    capacity: total,
  });
  const appends = new PacedAppends(appenderSql, seqFrom, total, perSecond);
  const meter = db.meter();
  let measurement: Measurement | undefined;
  let window: RebuildProcessWindow | undefined;
  let outcome: RebuildOutcome;
  try {
    await sleep(200); // LISTEN connected, first poll done (as in the latency scenario)
    await appends.run(
      () => false,
      async (i) => {
        if (i !== warmup) return;
        dispatcher.measure();
        await meter.start();
      },
    );
    measurement = await meter.stop();
    window = await dispatcher.endMeasure();
    outcome = await dispatcher.finish(seqFrom + appends.count, 10_000);
  } finally {
    await dispatcher.stop();
  }
  const v1 = servingVersion(outcome);
  const check = await projectionCheck(watchSql, 1);
  const latencies = appends.latencies(v1.handledAt, warmup);
  rows.add(
    caseName,
    REBUILD_SYSTEMS.alone,
    latencyFigures(latencies, appends.achieved(), measurement, window),
    {
      lost: Math.max(v1.lost, check.missing),
      duplicated: v1.duplicated + check.spurious,
    },
  );
  progress(
    `  version 1 alone: commit→handler p50 ${fmt(percentile(latencies.commitToHandler, 50))} ms, p99 ${fmt(percentile(latencies.commitToHandler, 99))} ms`,
  );
}

/**
 * Phase C or B: version 2 rebuilt where `deployment` says while version 1 serves, until version 2
 * has caught up; then the takeover.
 */
async function phaseRebuild(
  { db, appenderSql, watchSql }: PhaseDatabase,
  deployment: Deployment,
  seqFrom: number,
  warmup: number,
  perSecond: number,
  timeoutMs: number,
  rows: RowCollector,
  caseName: string,
): Promise<void> {
  const capacity = Math.ceil((perSecond * timeoutMs) / 1000) + perSecond;
  const start = (versions: readonly number[]) =>
    RebuildDispatcher.start({ url: db.url, poolSize: DISPATCHER_POOL, versions, seqFrom, capacity });
  // The serving process; in phase C, the rebuild's process is started after it (as it is deployed
  // beside serving processes that run already).
  const serving = await start(deployment.separate ? [1] : [1, 2]);
  const rebuilding = deployment.separate
    ? await start([2]).catch(async (error: unknown) => {
        await serving.stop();
        throw error;
      })
    : serving;
  const processes = rebuilding === serving ? [serving] : [serving, rebuilding];
  /** `f` of the serving process and of the rebuild's, at once (one call when they are the same process). */
  const ofBoth = async <T>(f: (p: RebuildDispatcher) => Promise<T>): Promise<[T, T]> => {
    if (rebuilding === serving) {
      const both = await f(serving);
      return [both, both];
    }
    return Promise.all([f(serving), f(rebuilding)]);
  };
  const appends = new PacedAppends(appenderSql, seqFrom, capacity, perSecond);
  const meter = db.meter();
  let caughtUp: { at: number; cursor: number } | undefined;
  const watching = { on: true };
  let measurement: Measurement | undefined;
  let servingWindow: RebuildProcessWindow | undefined;
  let rebuildWindow: RebuildProcessWindow | undefined;
  let takeoverMs: number | undefined;
  let servingOutcome: RebuildOutcome;
  let rebuildOutcome: RebuildOutcome;
  try {
    // The rebuild has started (registered in start()): CPU is measured from here to the catch-up.
    for (const p of processes) p.measure();
    await meter.start();
    const deadline = rebuilding.startCalledAt + timeoutMs;
    const watch = (async () => {
      while (watching.on) {
        const c = await cursors(watchSql);
        if (c.v2 >= c.v1) {
          caughtUp = { at: performance.now(), cursor: c.v2 };
          return;
        }
        if (performance.now() > deadline) return;
        await sleep(WATCH_MS);
      }
    })();
    await appends.run(() => caughtUp !== undefined || performance.now() > deadline);
    watching.on = false;
    await watch;
    // The window ends at the catch-up (the last append went out right before it was seen).
    measurement = await meter.stop();
    [servingWindow, rebuildWindow] = await ofBoth((p) => p.endMeasure());
    if (caughtUp === undefined) {
      progress(
        `  ! version 2 did not catch up within ${timeoutMs / 1000} s: no takeover, its events counted as lost`,
      );
    } else {
      if (!(await serving.v1Through(seqFrom + appends.count, 10_000))) {
        progress('  ! version 1 did not deliver the last appends within 10 s');
      }
      takeoverMs = await takeOver(watchSql);
      if (takeoverMs === undefined) progress('  ! version 2 was not live 30 s after the approval');
    }
    const finishMs = caughtUp === undefined ? 1_000 : 30_000;
    [servingOutcome, rebuildOutcome] = await ofBoth((p) => p.finish(seqFrom + appends.count, finishMs));
  } finally {
    watching.on = false;
    await Promise.all(processes.map((p) => p.stop()));
  }

  const v1 = servingVersion(servingOutcome);
  const latencies = appends.latencies(v1.handledAt, warmup);
  const v1Check = await projectionCheck(watchSql, 1);
  const v2Check = await projectionCheck(watchSql, 2);
  rows.add(
    caseName,
    deployment.during,
    latencyFigures(latencies, appends.achieved(), measurement, servingWindow),
    {
      lost: Math.max(v1.lost, v1Check.missing),
      duplicated: v1.duplicated + v1Check.spurious,
    },
  );
  const durationMs = caughtUp === undefined ? undefined : caughtUp.at - rebuilding.startCalledAt;
  const rate = caughtUp && durationMs !== undefined ? (caughtUp.cursor * 1000) / durationMs : undefined;
  const v2 = rebuildOutcome.v2;
  rows.add(
    caseName,
    deployment.rebuild,
    [
      { name: 'rebuild rate', unit: 'events/s', value: rate },
      { name: 'rebuild took', unit: 's', value: durationMs === undefined ? undefined : durationMs / 1000 },
      { name: 'events rebuilt', unit: '', value: caughtUp?.cursor },
      { name: 'appended during the rebuild', unit: '', value: appends.count },
      {
        name: 'first rebuilt event after start()',
        unit: 'ms',
        value: v2 && v2.firstAt > 0 ? v2.firstAt - rebuilding.startCalledAt : undefined,
      },
      { name: 'takeover took', unit: 'ms', value: takeoverMs },
      ...cpuFigures(measurement, rebuildWindow),
      {
        name: 'WAL per rebuilt event',
        unit: 'bytes',
        value: caughtUp ? measurement.walBytes / caughtUp.cursor : undefined,
      },
    ],
    {
      lost: Math.max(v2?.lost ?? 0, v2Check.missing),
      duplicated: (v2?.duplicated ?? 0) + v2Check.spurious,
    },
  );
  progress(
    `  version 1 while version 2 rebuilds ${deployment.where}: commit→handler p50 ${fmt(percentile(latencies.commitToHandler, 50))} ms, p99 ${fmt(percentile(latencies.commitToHandler, 99))} ms; ` +
      `version 2 rebuilt ${caughtUp?.cursor.toLocaleString('en') ?? '?'} events at ${rate === undefined ? '?' : Math.round(rate).toLocaleString('en')} events/s ` +
      `in ${durationMs === undefined ? '?' : (durationMs / 1000).toFixed(1)} s, takeover ${takeoverMs === undefined ? '?' : takeoverMs.toFixed(0)} ms`,
  );
}

/**
 * Approves version 2's takeover as the admin API does and waits (at most 30 s) for it to be live:
 * the ms from the approval to liveVersion() reading 2, undefined if it never did.
 */
async function takeOver(sql: postgres.Sql): Promise<number | undefined> {
  const approvedAt = performance.now();
  await beginTakeover(sql, tables(sql, SCHEMA), SCHEMA, STATS_CONSUMER, {
    actor: ACTOR,
    version: 2,
    within: APPROVE_WITHIN_DEFAULT,
    lockTimeoutMs: ADMIN_DEFAULTS.lockTimeoutMs,
  });
  for (;;) {
    if ((await liveVersion(sql, STATS_CONSUMER, { schema: SCHEMA })) === 2)
      return performance.now() - approvedAt;
    if (performance.now() - approvedAt > 30_000) return undefined;
    await sleep(5);
  }
}

function fmt(value: number): string {
  return Number.isFinite(value) ? value.toFixed(2) : 'n/a';
}

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

/**
 * Scenario 7: a new version of a projection rebuilt beside the live one while appends go on.
 * Version 1 of a transactional projection writing one row per event (through ctx.tx) is live and
 * caught up on a log of `events` events. Phase A: a dispatcher process declaring version 1 alone
 * serves a steady append load (the latency scenario's rate); version 1's commit→handler latency is
 * measured. Phase B: a new dispatcher process declares versions 1 and 2 (a deployment bringing
 * version 2), which rebuilds from the beginning of the log into its own table while version 1
 * serves the same load; version 1's latency is measured until version 2 has caught up with it,
 * and version 2's rate. The takeover is then approved (beginTakeover, as the admin API approves
 * it), and version 2's table is checked against the log.
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

  for (let run = 0; run < runs; run++) {
    const db = await runDatabase(ctx, template, 'rebuild');
    const appenderSql = pool(db.url, 2);
    const watchSql = pool(db.url, 1);
    try {
      await watchSql`select 1`;
      progress(`rebuild: run ${run + 1}/${runs}, version 1 alone (${aloneTotal} appends at ${perSecond}/s)`);
      await phaseAlone(db, appenderSql, watchSql, events, aloneTotal, warmup, perSecond, rows, caseName);
      progress(
        `rebuild: run ${run + 1}/${runs}, version 2 rebuilding ${events.toLocaleString('en')}+ events beside version 1`,
      );
      await phaseRebuild(
        db,
        appenderSql,
        watchSql,
        events + aloneTotal,
        warmup,
        perSecond,
        rebuildTimeoutMs,
        rows,
        caseName,
      );
    } finally {
      await appenderSql.end();
      await watchSql.end();
      await db.drop();
    }
  }

  const runsNote =
    runs === config.runs
      ? ''
      : ` (${runs} runs, not ${config.runs}: each rebuilds the whole log${runs === 2 ? '; the median of two is their mean' : ''})`;
  return {
    scenario: 'rebuild',
    title: `Rebuild: version 2 of a projection writing one row per event rebuilt from a ${events.toLocaleString('en')}-event log while version 1 serves ${perSecond} appends/s`,
    rows: rows.rows(),
    profiles: [],
    notes: [
      `Each run${runsNote} clones a template holding ${events.toLocaleString('en')} events of ~1 KB and version 1 of a transactional projection ("${STATS_CONSUMER}", declared with version: 1) live and caught up on them: ` +
        `its row registered at the head (startFrom 'now', by a dispatcher declaring it), its table (${statsTable(1)}, event id, order id, total; keyed by the event id) holding the row its handler writes for every event, filled in SQL when the template was built. ` +
        `Each version's handler writes one row per event into its own table (${statsTable(1)}, ${statsTable(2)}: the table of ctx.version) through ctx.tx, inside the turn's transaction, ` +
        "with the catch-up case's statement (INSERT … ON CONFLICT DO NOTHING).",
      `Phase A, version 1 alone: a dispatcher in a Node process of its own (src/rebuild-process.ts, only Sluice and postgres.js loaded) declares version 1; ` +
        `one appender in the scenario's process sends ${perSecond} single-event transactions per second, paced by the clock (the latency scenario's load and statement: transaction() + append(), its NOTIFY after the commit), ` +
        `for ${seconds} s after a ${warmupSeconds} s warm-up that is not counted. ` +
        'Phase B, the rebuild: that process stops; a new one declares versions 1 and 2 (a deployment that brings version 2): registration starts the rebuild, ' +
        "version 2's rows starting at the beginning of the log (stats@v2), while version 1 goes on serving the same load, again with the first " +
        `${warmupSeconds} s not counted. The appends go on until version 2 has caught up with version 1 (its cursor at version 1's or beyond, looked at every ${WATCH_MS} ms on a connection of its own), ` +
        "so version 1's latency is measured over the whole rebuild.",
      "Latency is version 1's, as in the latency scenario's row with the dispatcher in another process: commit→handler from the moment the appending transaction's COMMIT returned to its handler's first line " +
        "(noted on the machine's monotonic clock in the dispatcher's process), append→handler from just before the append call, append→commit the append's own share. " +
        `Sluice runs at its default options (batchSize ${DEFAULTS.batchSize}, maxBatchSize at its default, concurrency ${DEFAULTS.concurrency}, pollIntervalMs ${DEFAULTS.pollIntervalMs}), a pool of ${DISPATCHER_POOL}: ` +
        "both versions' turns share the process's turn slots, its pool and its event loop, and PostgreSQL's cores with the appender.",
      "The rebuild's rate: the events version 2 went through (its cursor when it caught up) divided by the time from the dispatcher's start() (its registration starts the rebuild) to that moment; " +
        'its duration is that time. Then the appends stop, version 1 delivers the last of them, and the takeover is approved as an operator approves it through the admin API ' +
        `(beginTakeover from @sluice/core/internal, within ${APPROVE_WITHIN_DEFAULT.toLocaleString('en')} events of the head, lock timeout ${ADMIN_DEFAULTS.lockTimeoutMs} ms): ` +
        'version 1 stops at the barrier and the dispatcher makes version 2 live once it has reached it; "takeover took" runs from the approval to liveVersion() reading 2.',
      "CPU: PostgreSQL = every server process (from /proc), as % of one core over each phase's measured window (phase A: its measured appends; phase B: from the dispatcher process's start, " +
        "the rebuild's, to the catch-up, the same window for version 1's row and the rebuild's); Node = the dispatcher's process alone (process.cpuUsage, read there), over the same window, and its GC pauses. " +
        "The appender's process is not counted. WAL per rebuilt event: all the WAL the cluster wrote over phase B's window (the appends and version 1's rows included) ÷ the events version 2 went through.",
      "Integrity: version 1's row counts its handler calls for the appended events (lost: never called; duplicated: called again, or called for an event it had before the phase) " +
        `and, after each phase, every event of the log without its row in ${statsTable(1)} (version 1 stops at the takeover's barrier, after the last append); ` +
        `version 2's row counts its handler calls for every event of the log and, once it is live, every committed event without its row in ${statsTable(2)} (lost) and rows for no event (duplicated).`,
    ],
  };
}

async function phaseAlone(
  db: RunDatabase,
  appenderSql: postgres.Sql,
  watchSql: postgres.Sql,
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
  const check = await projectionCheck(watchSql, 1);
  const latencies = appends.latencies(outcome.handledAt, warmup);
  rows.add(
    caseName,
    REBUILD_SYSTEMS.alone,
    latencyFigures(latencies, appends.achieved(), measurement, window),
    {
      lost: Math.max(outcome.v1.lost, check.missing),
      duplicated: outcome.v1.duplicated + check.spurious,
    },
  );
  progress(
    `  version 1 alone: commit→handler p50 ${fmt(percentile(latencies.commitToHandler, 50))} ms, p99 ${fmt(percentile(latencies.commitToHandler, 99))} ms`,
  );
}

async function phaseRebuild(
  db: RunDatabase,
  appenderSql: postgres.Sql,
  watchSql: postgres.Sql,
  seqFrom: number,
  warmup: number,
  perSecond: number,
  timeoutMs: number,
  rows: RowCollector,
  caseName: string,
): Promise<void> {
  const capacity = Math.ceil((perSecond * timeoutMs) / 1000) + perSecond;
  const dispatcher = await RebuildDispatcher.start({
    url: db.url,
    poolSize: DISPATCHER_POOL,
    versions: [1, 2],
    seqFrom,
    capacity,
  });
  const appends = new PacedAppends(appenderSql, seqFrom, capacity, perSecond);
  const meter = db.meter();
  let caughtUp: { at: number; cursor: number } | undefined;
  const watching = { on: true };
  let measurement: Measurement | undefined;
  let window: RebuildProcessWindow | undefined;
  let takeoverMs: number | undefined;
  let outcome: RebuildOutcome;
  try {
    // The rebuild has started (registered in start()): CPU is measured from here to the catch-up.
    dispatcher.measure();
    await meter.start();
    const deadline = dispatcher.startCalledAt + timeoutMs;
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
    window = await dispatcher.endMeasure();
    if (caughtUp === undefined) {
      progress(
        `  ! version 2 did not catch up within ${timeoutMs / 1000} s: no takeover, its events counted as lost`,
      );
    } else {
      if (!(await dispatcher.v1Through(seqFrom + appends.count, 10_000))) {
        progress('  ! version 1 did not deliver the last appends within 10 s');
      }
      const t = tables(watchSql, SCHEMA);
      const approvedAt = performance.now();
      await beginTakeover(watchSql, t, SCHEMA, STATS_CONSUMER, {
        actor: ACTOR,
        version: 2,
        within: APPROVE_WITHIN_DEFAULT,
        lockTimeoutMs: ADMIN_DEFAULTS.lockTimeoutMs,
      });
      while ((await liveVersion(watchSql, STATS_CONSUMER, { schema: SCHEMA })) !== 2) {
        if (performance.now() - approvedAt > 30_000) break;
        await sleep(5);
      }
      takeoverMs =
        (await liveVersion(watchSql, STATS_CONSUMER, { schema: SCHEMA })) === 2
          ? performance.now() - approvedAt
          : undefined;
      if (takeoverMs === undefined) progress('  ! version 2 was not live 30 s after the approval');
    }
    outcome = await dispatcher.finish(seqFrom + appends.count, caughtUp === undefined ? 1_000 : 30_000);
  } finally {
    watching.on = false;
    await dispatcher.stop();
  }

  const latencies = appends.latencies(outcome.handledAt, warmup);
  const v1Check = await projectionCheck(watchSql, 1);
  const v2Check = await projectionCheck(watchSql, 2);
  rows.add(
    caseName,
    REBUILD_SYSTEMS.during,
    latencyFigures(latencies, appends.achieved(), measurement, window),
    {
      lost: Math.max(outcome.v1.lost, v1Check.missing),
      duplicated: outcome.v1.duplicated + v1Check.spurious,
    },
  );
  const durationMs = caughtUp === undefined ? undefined : caughtUp.at - dispatcher.startCalledAt;
  const rate = caughtUp && durationMs !== undefined ? (caughtUp.cursor * 1000) / durationMs : undefined;
  const v2 = outcome.v2;
  rows.add(
    caseName,
    REBUILD_SYSTEMS.rebuild,
    [
      { name: 'rebuild rate', unit: 'events/s', value: rate },
      { name: 'rebuild took', unit: 's', value: durationMs === undefined ? undefined : durationMs / 1000 },
      { name: 'events rebuilt', unit: '', value: caughtUp?.cursor },
      { name: 'appended during the rebuild', unit: '', value: appends.count },
      {
        name: 'first rebuilt event after start()',
        unit: 'ms',
        value: v2 && v2.firstAt > 0 ? v2.firstAt - dispatcher.startCalledAt : undefined,
      },
      { name: 'takeover took', unit: 'ms', value: takeoverMs },
      ...cpuFigures(measurement, window),
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
    `  version 1 during the rebuild: commit→handler p50 ${fmt(percentile(latencies.commitToHandler, 50))} ms, p99 ${fmt(percentile(latencies.commitToHandler, 99))} ms; ` +
      `version 2 rebuilt ${caughtUp?.cursor.toLocaleString('en') ?? '?'} events at ${rate === undefined ? '?' : Math.round(rate).toLocaleString('en')} events/s ` +
      `in ${durationMs === undefined ? '?' : (durationMs / 1000).toFixed(1)} s, takeover ${takeoverMs === undefined ? '?' : takeoverMs.toFixed(0)} ms`,
  );
}

function fmt(value: number): string {
  return Number.isFinite(value) ? value.toFixed(2) : 'n/a';
}

import { DEFAULTS } from '@sluice/core';

/** Sizes of one `pnpm bench` run. `--quick` shrinks every scenario to fit about two minutes. */
export interface BenchConfig {
  readonly mode: 'full' | 'quick' | 'tiny';
  /** Runs per figure (min / median / max are reported over them). */
  readonly runs: number;
  readonly catchUp: {
    /**
     * Each consumer drains the whole backlog (N consumers = N × backlog deliveries), so the backlog
     * shrinks as consumers grow: 10 × 50k and 50 × 10k are 500k deliveries each.
     */
    readonly cases: readonly { readonly consumers: number; readonly backlog: number }[];
    /** The peers drain smaller backlogs: at their rates a 100k backlog would not fit the time budget. */
    readonly emmettBacklog: number;
    readonly graphileBacklog: number;
    /**
     * The case with one consumer writing one row per event (a transactional consumer against the
     * minimal loop writing the same rows): its backlog, one of the cases' above (no template of its own).
     */
    readonly projectionBacklog: number;
    /** Events per fetch (LIMIT) of the minimal loop and the raw scan: Sluice's default batchSize. Sluice runs at its defaults. */
    readonly batchSize: number;
    /** Concurrent turns (Sluice `concurrency`) = connections of the minimal loop / raw scan: min(consumers, cap). */
    readonly concurrencyCap: number;
  };
  readonly slowHandler: {
    /** The backlog drained with several handler calls at once (every case but one lane's). */
    readonly events: number;
    /**
     * One lane's backlog (the first events of the same log): at one call at a time a 5 ms handler
     * delivers at most 200 events/s, so the whole backlog would take 100 s a run.
     */
    readonly oneLaneEvents: number;
    /** Streams the events are spread over, each event's drawn at random (seeded). */
    readonly streams: number;
    /** What every handler call awaits (a timer). */
    readonly handlerMs: number;
    /** Sluice's lane counts (its concurrency = lanes). */
    readonly lanes: readonly number[];
    /** graphile-worker's concurrency (one job per event). */
    readonly graphileConcurrency: readonly number[];
  };
  readonly latency: { readonly perSecond: number; readonly seconds: number; readonly warmupSeconds: number };
  readonly append: {
    /** Runs of each system (default: runs); more here, where run-to-run noise is near the target's margin. */
    readonly runs?: number;
    readonly writers: number;
    /** Measured seconds of each system, in `rounds` equal slices taken in turn with the others. */
    readonly seconds: number;
    readonly rounds: number;
    /** Writing before the measured seconds, on the same fresh database: not measured. */
    readonly warmupSeconds: number;
    readonly eventsPerTx: readonly number[];
  };
  readonly idle: {
    readonly consumers: number;
    readonly withGaps: number;
    readonly seconds: number;
    /**
     * Before the window: wait until a full GC has run after the setup and none for this long since
     * (0: do not wait), at most `gcSettleMaxMs` after the setup. See FullGcWatch.
     */
    readonly gcQuietMs: number;
    readonly gcSettleMaxMs: number;
  };
  readonly scale: { readonly events: number };
  readonly rebuild: {
    /**
     * Runs (default: runs). Each run rebuilds the whole log twice, the longest of any scenario's
     * runs: fewer here keeps the full run's time in bounds.
     */
    readonly runs?: number;
    /**
     * The log version 2 of the projection rebuilds from its beginning (version 1 is live and caught
     * up on it at the start of each run). Appends go on at the latency scenario's rate.
     */
    readonly events: number;
    /** Measured seconds of appends with version 1 serving alone (no rebuild). */
    readonly seconds: number;
    /** Appends at the start of each phase that are not measured (fresh dispatcher processes warming up). */
    readonly warmupSeconds: number;
  };
}

export const FULL: BenchConfig = {
  mode: 'full',
  // Five: several figures (p99 latency, idle CPU over 10 s, the 1-consumer ratios) move from run to
  // run by about their margin to the target on this shared machine; the median of five is steadier.
  runs: 5,
  catchUp: {
    cases: [
      { consumers: 1, backlog: 100_000 },
      { consumers: 10, backlog: 50_000 },
      { consumers: 50, backlog: 10_000 },
    ],
    emmettBacklog: 10_000,
    graphileBacklog: 100_000,
    projectionBacklog: 50_000,
    batchSize: DEFAULTS.batchSize,
    concurrencyCap: 8,
  },
  // About 45 s a run (~4 min with 5 runs): 1 lane ~3 s (500 events), 8 at once ~14–17 s each system,
  // 32 at once ~4–7 s each.
  slowHandler: {
    events: 20_000,
    oneLaneEvents: 500,
    streams: 1_000,
    handlerMs: 5,
    lanes: [1, 8, 32],
    graphileConcurrency: [8, 32],
  },
  latency: { perSecond: 200, seconds: 6, warmupSeconds: 1 },
  append: { writers: 8, seconds: 3, rounds: 6, warmupSeconds: 1, eventsPerTx: [1, 10] },
  idle: { consumers: 100, withGaps: 10, seconds: 10, gcQuietMs: 9_000, gcSettleMaxMs: 45_000 },
  scale: { events: 1_000_000 },
  // About 5 min a run (two 1M-event rebuilds writing a row per event on a 2-core machine: ~115 s in
  // a process of its own, ~140 s in the serving process; phase A 23 s; a clone and checks per
  // phase), so 2 runs, not 5: ~10 min in all. Each phase starts fresh dispatcher
  // processes: 3 s of warm-up are left out of every phase, as their first seconds would weigh more
  // on phase A's 20 s than on the rebuilds' minutes.
  rebuild: { runs: 2, events: 1_000_000, seconds: 20, warmupSeconds: 3 },
};

export const QUICK: BenchConfig = {
  mode: 'quick',
  runs: 3,
  catchUp: {
    cases: [
      { consumers: 1, backlog: 6_000 },
      { consumers: 10, backlog: 1_000 },
      { consumers: 50, backlog: 200 },
    ],
    emmettBacklog: 1_000,
    graphileBacklog: 6_000,
    projectionBacklog: 6_000,
    batchSize: DEFAULTS.batchSize,
    concurrencyCap: 8,
  },
  slowHandler: {
    events: 4_000,
    oneLaneEvents: 300,
    streams: 1_000,
    handlerMs: 5,
    lanes: [1, 8, 32],
    graphileConcurrency: [8, 32],
  },
  latency: { perSecond: 200, seconds: 1, warmupSeconds: 0.3 },
  append: { writers: 8, seconds: 0.6, rounds: 2, warmupSeconds: 0.2, eventsPerTx: [1, 10] },
  idle: { consumers: 100, withGaps: 10, seconds: 1.5, gcQuietMs: 0, gcSettleMaxMs: 0 },
  scale: { events: 30_000 },
  rebuild: { events: 50_000, seconds: 5, warmupSeconds: 1 },
};

/** A smoke test of the harness itself (`--tiny`): seconds, figures meaningless, never written to RESULTS.md. */
export const TINY: BenchConfig = {
  mode: 'tiny',
  runs: 3,
  catchUp: {
    cases: [
      { consumers: 1, backlog: 2_000 },
      { consumers: 10, backlog: 300 },
      { consumers: 50, backlog: 100 },
    ],
    emmettBacklog: 200,
    graphileBacklog: 1_000,
    projectionBacklog: 2_000,
    batchSize: DEFAULTS.batchSize,
    concurrencyCap: 8,
  },
  slowHandler: {
    events: 1_000,
    oneLaneEvents: 100,
    streams: 1_000,
    handlerMs: 5,
    lanes: [1, 8, 32],
    graphileConcurrency: [8, 32],
  },
  latency: { perSecond: 200, seconds: 0.5, warmupSeconds: 0.2 },
  append: { writers: 8, seconds: 0.3, rounds: 1, warmupSeconds: 0.1, eventsPerTx: [1, 10] },
  idle: { consumers: 100, withGaps: 10, seconds: 1, gcQuietMs: 0, gcSettleMaxMs: 0 },
  scale: { events: 5_000 },
  rebuild: { events: 5_000, seconds: 1, warmupSeconds: 0.2 },
};

/** `--quick` on the command line, or SLUICE_BENCH_QUICK=1 (turbo passes it through, see bench/turbo.json). */
export function configFromArgs(argv: readonly string[], env: NodeJS.ProcessEnv): BenchConfig {
  if (argv.includes('--tiny')) return TINY;
  const quick = argv.includes('--quick') || env['SLUICE_BENCH_QUICK'] === '1';
  return quick ? QUICK : FULL;
}

import { DEFAULTS } from '@sluice/core';
import { formatNumber, summarize, type Summary } from '../harness/stats.js';
import {
  APPEND_SYSTEMS,
  CATCH_UP_LANES,
  CATCH_UP_SYSTEMS as SYSTEMS,
  IDLE_SYSTEMS,
  LATENCY_SYSTEMS,
  PROJECTION_CASE,
  REBUILD_SYSTEMS,
  SLOW_HANDLER_SYSTEMS,
  slowHandlerCase,
} from '../names.js';
import { pairwise, runsOf } from './find.js';
import type { ScenarioId, ScenarioResult } from './types.js';

export interface TargetResult {
  readonly scenario: ScenarioId;
  readonly target: string;
  readonly goal: string;
  /** Over the runs (ratios are taken run by run: run i of one system against run i of the other). */
  readonly achieved: Summary | undefined;
  readonly unit: string;
  /** undefined: no goal (the figure is shown), or not measured. */
  readonly met: boolean | undefined;
}

const ratio = (x: number, y: number) => x / y;

/** The slow-handler figures of order per stream: 0 for every Sluice run, shown for graphile-worker. */
const ORDER_FIGURES: readonly string[] = [
  'per-stream inversions',
  'per-stream inversions at finish',
  'per-stream overlaps',
];

export function evaluateTargets(results: readonly ScenarioResult[]): TargetResult[] {
  const find = (scenario: ScenarioId, caseName: string | undefined, system: string, figure: string) =>
    runsOf(results, scenario, caseName, system, figure);
  const targets: TargetResult[] = [];
  const add = (
    scenario: ScenarioId,
    target: string,
    goal: string,
    values: number[] | undefined,
    unit: string,
    test: ((median: number) => boolean) | undefined,
  ) => {
    if (!results.some((r) => r.scenario === scenario)) return;
    const achieved = values && values.length > 0 ? summarize(values) : undefined;
    targets.push({
      scenario,
      target,
      goal,
      achieved,
      unit,
      met: achieved && test ? test(achieved.median) : undefined,
    });
  };

  // Catch-up.
  const total = (caseName: string, system: string) => find('catch-up', caseName, system, 'total');
  add(
    'catch-up',
    '1 consumer: Sluice ÷ minimal loop',
    '≥ 1.0×',
    pairwise(total('1 consumer', SYSTEMS.sluice), total('1 consumer', SYSTEMS.minimal), ratio),
    '×',
    (m) => m >= 1.0,
  );
  add(
    'catch-up',
    '1 consumer: Sluice ÷ raw scan at the same LIMIT',
    '≥ 0.9×',
    pairwise(total('1 consumer', SYSTEMS.sluice), total('1 consumer', SYSTEMS.raw), ratio),
    '×',
    (m) => m >= 0.9,
  );
  add(
    'catch-up',
    "10 consumers: Sluice's total ÷ minimal loop's total",
    '≥ 2×',
    pairwise(total('10 consumers', SYSTEMS.sluice), total('10 consumers', SYSTEMS.minimal), ratio),
    '×',
    (m) => m >= 2,
  );
  add(
    'catch-up',
    "50 consumers: Sluice's total ÷ minimal loop's total",
    '(no target; shown)',
    pairwise(total('50 consumers', SYSTEMS.sluice), total('50 consumers', SYSTEMS.minimal), ratio),
    '×',
    undefined,
  );
  add(
    'catch-up',
    '1 consumer: Sluice ÷ graphile-worker',
    '≥ 3×',
    pairwise(total('1 consumer', SYSTEMS.sluice), total('1 consumer', SYSTEMS.graphile), ratio),
    '×',
    (m) => m >= 3,
  );
  add(
    'catch-up',
    `${PROJECTION_CASE}: Sluice's transactional consumer ÷ the minimal loop writing the same rows`,
    '≥ 0.8×',
    pairwise(
      total(PROJECTION_CASE, SYSTEMS.sluiceTransactional),
      total(PROJECTION_CASE, SYSTEMS.minimalWriting),
      ratio,
    ),
    '×',
    (m) => m >= 0.8,
  );

  // Keyed lanes (issue 29): what reading the log once per lane costs the server, per event.
  const oneConsumer = (system: string, figure: string) => find('catch-up', '1 consumer', system, figure);
  add(
    'catch-up',
    `1 consumer: PostgreSQL CPU per event, ${CATCH_UP_LANES} lanes ÷ 1 lane`,
    '≤ 2×',
    pairwise(
      oneConsumer(SYSTEMS.sluiceLanes, 'PostgreSQL CPU per event'),
      oneConsumer(SYSTEMS.sluice, 'PostgreSQL CPU per event'),
      ratio,
    ),
    '×',
    (m) => m <= 2,
  );
  add(
    'catch-up',
    `1 consumer: events/s, ${CATCH_UP_LANES} lanes ÷ 1 lane`,
    '(shown)',
    pairwise(total('1 consumer', SYSTEMS.sluiceLanes), total('1 consumer', SYSTEMS.sluice), ratio),
    '×',
    undefined,
  );

  // Slow handler (issue 29): lanes against graphile-worker at the same concurrency.
  const slow = (concurrency: number, system: string, figure: string) =>
    find('slow-handler', slowHandlerCase(concurrency), system, figure);
  const slowRate = (concurrency: number, system: string) => slow(concurrency, system, 'throughput');
  add(
    'slow-handler',
    'Sluice 32 lanes ÷ graphile-worker at concurrency 32',
    '≥ 0.8×',
    pairwise(
      slowRate(32, SLOW_HANDLER_SYSTEMS.sluice(32)),
      slowRate(32, SLOW_HANDLER_SYSTEMS.graphile),
      ratio,
    ),
    '×',
    (m) => m >= 0.8,
  );
  add(
    'slow-handler',
    'Sluice 8 lanes ÷ graphile-worker at concurrency 8',
    '(shown)',
    pairwise(slowRate(8, SLOW_HANDLER_SYSTEMS.sluice(8)), slowRate(8, SLOW_HANDLER_SYSTEMS.graphile), ratio),
    '×',
    undefined,
  );
  add(
    'slow-handler',
    'Sluice 32 lanes ÷ 1 lane',
    '(shown)',
    pairwise(
      slowRate(32, SLOW_HANDLER_SYSTEMS.sluice(32)),
      slowRate(1, SLOW_HANDLER_SYSTEMS.sluice(1)),
      ratio,
    ),
    '×',
    undefined,
  );
  // Order per stream: every Sluice row, every run, must have no inversion and no overlap.
  const slowResult = results.find((r) => r.scenario === 'slow-handler');
  const sluiceOrder = slowResult?.rows
    .filter((row) => row.system !== SLOW_HANDLER_SYSTEMS.graphile)
    .flatMap((row) => row.figures.filter((f) => ORDER_FIGURES.includes(f.name)).flatMap((f) => f.runs));
  add(
    'slow-handler',
    "per-stream inversions (at start and at finish) + overlaps, Sluice's runs (every lane count and run, summed)",
    '0',
    sluiceOrder && sluiceOrder.length > 0 ? [sluiceOrder.reduce((a, b) => a + b, 0)] : undefined,
    '',
    (m) => m === 0,
  );
  for (const figure of ORDER_FIGURES) {
    add(
      'slow-handler',
      `${figure}, graphile-worker at concurrency 32 (per run)`,
      '(shown: no order promised)',
      slow(32, SLOW_HANDLER_SYSTEMS.graphile, figure),
      '',
      undefined,
    );
  }

  // Append.
  for (const perTx of ['1 event/tx', '10 events/tx']) {
    const events = (system: string) => find('append', `8 writers, ${perTx}`, system, 'events/s');
    add(
      'append',
      `${perTx}: Sluice transaction() + append() ÷ bare insert`,
      '≥ 0.95×',
      pairwise(events(APPEND_SYSTEMS.auto), events(APPEND_SYSTEMS.bare), ratio),
      '×',
      (m) => m >= 0.95,
    );
    add(
      'append',
      `${perTx}: cost of the after-commit wake-up (1 − transaction() ÷ wakeUp none)`,
      perTx === '1 event/tx' ? '≤ 5 %' : '(shown)',
      pairwise(events(APPEND_SYSTEMS.auto), events(APPEND_SYSTEMS.none), (a, n) => 100 * (1 - a / n)),
      '%',
      perTx === '1 event/tx' ? (m) => m <= 5 : undefined,
    );
    add(
      'append',
      `${perTx}: cost of in-transaction NOTIFY (1 − in-transaction ÷ wakeUp none)`,
      '(shown)',
      pairwise(events(APPEND_SYSTEMS.inTx), events(APPEND_SYSTEMS.none), (a, n) => 100 * (1 - a / n)),
      '%',
      undefined,
    );
  }

  // Latency. From the commit: what the dispatcher adds once the producer's transaction has
  // committed, each system measured from the moment its adding transaction's COMMIT returned.
  const lat = (system: string, figure: string) => find('latency', undefined, system, figure);
  const vsGraphile = (system: string, figure: string) =>
    pairwise(lat(system, figure), lat(LATENCY_SYSTEMS.graphile, figure), ratio);
  add(
    'latency',
    "commit→handler p50: Sluice (dispatcher in another process) ÷ graphile-worker's (add→start from its commit)",
    '≤ 1.0×',
    vsGraphile(LATENCY_SYSTEMS.otherProcess, 'commit→handler p50'),
    '×',
    (m) => m <= 1.0,
  );
  add(
    'latency',
    "commit→handler p99: Sluice (dispatcher in another process) ÷ graphile-worker's",
    '≤ 1.0×',
    vsGraphile(LATENCY_SYSTEMS.otherProcess, 'commit→handler p99'),
    '×',
    (m) => m <= 1.0,
  );
  add(
    'latency',
    "commit→handler p50: Sluice (in-process wake-up) ÷ graphile-worker's",
    '≤ 0.6×',
    vsGraphile(LATENCY_SYSTEMS.inProcess, 'commit→handler p50'),
    '×',
    (m) => m <= 0.6,
  );
  // The same dispatcher process woken by a NOTIFY inside the appending transaction, as
  // graphile-worker's is: how much of the two rows above is the after-commit NOTIFY's round trip.
  add(
    'latency',
    "commit→handler p50: Sluice (dispatcher in another process, wakeUp 'in-transaction') ÷ graphile-worker's",
    '(shown)',
    vsGraphile(LATENCY_SYSTEMS.otherProcessInTx, 'commit→handler p50'),
    '×',
    undefined,
  );
  add(
    'latency',
    "commit→handler p99: Sluice (dispatcher in another process, wakeUp 'in-transaction') ÷ graphile-worker's",
    '(shown)',
    vsGraphile(LATENCY_SYSTEMS.otherProcessInTx, 'commit→handler p99'),
    '×',
    undefined,
  );
  // Where the goals lie against the smallest correct consumer, woken by a NOTIFY inside the
  // producer's transaction (no round trip after the commit), in the same runs.
  add(
    'latency',
    "commit→handler p50: minimal loop woken by LISTEN ÷ graphile-worker's",
    '(shown)',
    vsGraphile(LATENCY_SYSTEMS.minimal, 'commit→handler p50'),
    '×',
    undefined,
  );
  // From the append call, with the append's own share: the producer's transaction, which no
  // dispatcher shortens.
  add(
    'latency',
    "append call→handler p50: Sluice (dispatcher in another process) ÷ graphile-worker's",
    '(shown)',
    vsGraphile(LATENCY_SYSTEMS.otherProcess, 'p50'),
    '×',
    undefined,
  );
  const appendShare = (system: string) =>
    pairwise(lat(system, 'append→commit p50'), lat(system, 'p50'), (a, b) => (100 * a) / b);
  add(
    'latency',
    "the append's own share of it (append→commit p50 ÷ append call→handler p50): Sluice (dispatcher in another process)",
    '(shown)',
    appendShare(LATENCY_SYSTEMS.otherProcess),
    '%',
    undefined,
  );
  add(
    'latency',
    "the append's own share of it: graphile-worker (BEGIN, add_job, COMMIT)",
    '(shown)',
    appendShare(LATENCY_SYSTEMS.graphile),
    '%',
    undefined,
  );
  // Allocation on the latency path: appending and delivering one event, both of the dispatcher's
  // and the appender's processes counted, against graphile-worker's one process doing both.
  add(
    'latency',
    "allocated per delivered event: Sluice (dispatcher in another process, both processes) ÷ graphile-worker's",
    '≤ 1.0×',
    vsGraphile(LATENCY_SYSTEMS.otherProcess, 'allocated per event'),
    '×',
    (m) => m <= 1.0,
  );
  add(
    'latency',
    'p99: Sluice (another pool of the same process) ÷ minimal loop woken by LISTEN',
    '≤ 2×',
    pairwise(lat(LATENCY_SYSTEMS.otherPool, 'p99'), lat(LATENCY_SYSTEMS.minimal, 'p99'), ratio),
    '×',
    (m) => m <= 2,
  );
  add(
    'latency',
    'p99: Sluice (in-process wake-up) ÷ minimal loop woken by LISTEN',
    '≤ 2×',
    pairwise(lat(LATENCY_SYSTEMS.inProcess, 'p99'), lat(LATENCY_SYSTEMS.minimal, 'p99'), ratio),
    '×',
    (m) => m <= 2,
  );
  // The poll interval bounds the wait after the event is committed: the appender's own commit
  // (in append→handler) is not the dispatcher's, so this one is measured from the commit.
  add(
    'latency',
    'polling only: commit→handler p99',
    `≤ poll interval + 5 ms = ${DEFAULTS.pollIntervalMs + 5} ms`,
    lat(LATENCY_SYSTEMS.polling, 'commit→handler p99'),
    'ms',
    (m) => m <= DEFAULTS.pollIntervalMs + 5,
  );

  // Idle.
  const idle = (figure: string) => find('idle', undefined, IDLE_SYSTEMS.sluice, figure);
  add(
    'idle',
    'statements per poll tick (one process)',
    '≤ 1',
    idle('statements per poll tick'),
    '',
    (m) => m <= 1,
  );
  add('idle', 'write transactions while idle', '0', idle('write transactions'), '', (m) => m === 0);
  add('idle', 'PostgreSQL CPU', '≤ 0.5 % of a core', idle('PostgreSQL CPU'), '%', (m) => m <= 0.5);
  // Shown, not a goal (issue 28): the floor itself (one statement per tick) swings past 1 % of a
  // core from run to run on a shared machine; the goal is what Sluice adds above it.
  add('idle', 'Node CPU', '(shown)', idle('Node CPU'), '%', undefined);
  const floor = (figure: string) => find('idle', undefined, IDLE_SYSTEMS.floor, figure);
  const minus = (a: number, b: number) => a - b;
  add(
    'idle',
    'PostgreSQL CPU above the floor (Sluice − select 1 per tick)',
    '(shown)',
    pairwise(idle('PostgreSQL CPU'), floor('PostgreSQL CPU'), minus),
    '%',
    undefined,
  );
  add(
    'idle',
    'Node CPU above the floor (Sluice − select 1 per tick)',
    '≤ 0.2 % of a core',
    pairwise(idle('Node CPU'), floor('Node CPU'), minus),
    '%',
    (m) => m <= 0.2,
  );

  // Scale.
  const scaleFigure = (figure: string) => find('scale', undefined, 'Sluice', figure);
  add(
    'scale',
    'throughput steady: last quarter ÷ first quarter of the run',
    '≥ 0.8× (our reading of "steady")',
    scaleFigure('last quarter / first quarter'),
    '×',
    (m) => m >= 0.8,
  );
  add('scale', 'peak RSS', '≤ 256 MiB', scaleFigure('peak RSS'), 'MiB', (m) => m <= 256);

  // Rebuild (issue 30): the serving version's latency while a new version rebuilds, in a process of
  // its own (the deployment docs/operating.md recommends: the goal) and in the serving process
  // (shown), against its own latency without a rebuild in the same run.
  const reb = (system: string, figure: string) => find('rebuild', undefined, system, figure);
  const vsAlone = (system: string, figure: string) =>
    pairwise(reb(system, figure), reb(REBUILD_SYSTEMS.alone, figure), ratio);
  add(
    'rebuild',
    'commit→handler p99 of the serving version (1) while version 2 rebuilds in a process of its own (the documented deployment) ÷ its p99 without a rebuild',
    '≤ 2×',
    vsAlone(REBUILD_SYSTEMS.duringSeparate, 'commit→handler p99'),
    '×',
    (m) => m <= 2,
  );
  add(
    'rebuild',
    'commit→handler p50 of the serving version while version 2 rebuilds in a process of its own ÷ without a rebuild',
    '(shown)',
    vsAlone(REBUILD_SYSTEMS.duringSeparate, 'commit→handler p50'),
    '×',
    undefined,
  );
  add(
    'rebuild',
    "commit→handler p99 of the serving version while version 2 rebuilds in the serving version's process ÷ without a rebuild",
    '(shown)',
    vsAlone(REBUILD_SYSTEMS.during, 'commit→handler p99'),
    '×',
    undefined,
  );
  add(
    'rebuild',
    "commit→handler p50 of the serving version while version 2 rebuilds in the serving version's process ÷ without a rebuild",
    '(shown)',
    vsAlone(REBUILD_SYSTEMS.during, 'commit→handler p50'),
    '×',
    undefined,
  );
  for (const [system, where] of [
    [REBUILD_SYSTEMS.rebuildSeparate, 'in a process of its own'],
    [REBUILD_SYSTEMS.rebuild, "in the serving version's process"],
  ] as const) {
    add(
      'rebuild',
      `version 2's rebuild rate ${where} (one row per event through ctx.tx)`,
      '(shown)',
      reb(system, 'rebuild rate'),
      'events/s',
      undefined,
    );
    add(
      'rebuild',
      `version 2's rebuild ${where}, from its registration to catching up with version 1`,
      '(shown)',
      reb(system, 'rebuild took'),
      's',
      undefined,
    );
  }

  // Integrity, per scenario.
  for (const result of results) {
    const lost = result.rows.reduce((sum, row) => sum + row.lost.reduce((a, b) => a + b, 0), 0);
    const duplicated = result.rows.reduce((sum, row) => sum + row.duplicated.reduce((a, b) => a + b, 0), 0);
    targets.push({
      scenario: result.scenario,
      target: 'lost + duplicated deliveries, every system and run',
      goal: '0',
      achieved: summarize([lost + duplicated]),
      unit: '',
      met: lost + duplicated === 0,
    });
  }
  return targets;
}

export function formatAchieved(t: TargetResult): string {
  if (!t.achieved) return 'not measured';
  const unit = t.unit === '' ? '' : t.unit === '×' || t.unit === '%' ? t.unit : ` ${t.unit}`;
  const { min, median, max } = t.achieved;
  const f = (v: number) => (t.unit === '×' ? v.toFixed(2) : formatNumber(v));
  return min === max ? `${f(median)}${unit}` : `${f(median)}${unit} (${f(min)}–${f(max)})`;
}

export function verdict(t: TargetResult): string {
  if (t.met === undefined) return t.achieved ? '—' : 'n/a';
  return t.met ? 'met' : 'MISSED';
}

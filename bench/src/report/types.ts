import type { StatementProfileRow } from '../harness/counters.js';

export type ScenarioId = 'catch-up' | 'latency' | 'append' | 'idle' | 'scale' | 'slow-handler' | 'rebuild';

export const SCENARIOS: readonly ScenarioId[] = [
  'catch-up',
  'latency',
  'append',
  'idle',
  'scale',
  'slow-handler',
  'rebuild',
];

/** One figure of one row, measured once per run. */
export interface Figure {
  readonly name: string;
  readonly unit: string;
  readonly runs: readonly number[];
}

export interface ResultRow {
  readonly scenario: ScenarioId;
  readonly case: string;
  readonly system: string;
  /** The first figure is the row's headline. */
  readonly figures: readonly Figure[];
  /** Per run. */
  readonly lost: readonly number[];
  readonly duplicated: readonly number[];
}

export interface StatementProfile {
  readonly label: string;
  /** What the counts are divided by (e.g. batches of 100 events). */
  readonly per: string;
  readonly divisor: number;
  readonly rows: readonly StatementProfileRow[];
}

export interface ScenarioResult {
  readonly scenario: ScenarioId;
  readonly title: string;
  readonly rows: readonly ResultRow[];
  /** What was configured and how it was measured, for RESULTS.md. */
  readonly notes: readonly string[];
  readonly profiles: readonly StatementProfile[];
}

/** One result from several single-run results of the same scenario (rows matched by case and system). */
export function mergeRuns(results: readonly ScenarioResult[]): ScenarioResult {
  const first = results[0];
  if (!first) throw new Error('mergeRuns: no results');
  const collector = new RowCollector(first.scenario);
  for (const result of results) {
    for (const row of result.rows) {
      row.lost.forEach((lost, run) => {
        collector.add(
          row.case,
          row.system,
          row.figures.map((f) => ({ name: f.name, unit: f.unit, value: f.runs[run] })),
          { lost, duplicated: row.duplicated[run] ?? 0 },
        );
      });
    }
  }
  const last = results[results.length - 1] ?? first;
  return { ...last, rows: collector.rows(), profiles: results.flatMap((r) => r.profiles) };
}

/** Collects the runs of each (case, system) row in the order they were first seen. */
export class RowCollector {
  readonly #rows = new Map<
    string,
    {
      case: string;
      system: string;
      figures: Map<string, Figure & { runs: number[] }>;
      lost: number[];
      duplicated: number[];
    }
  >();
  readonly #scenario: ScenarioId;

  constructor(scenario: ScenarioId) {
    this.#scenario = scenario;
  }

  add(
    caseName: string,
    system: string,
    figures: readonly { name: string; unit: string; value: number | undefined }[],
    integrity: { lost: number; duplicated: number },
  ): void {
    const key = `${caseName}\u0000${system}`;
    let row = this.#rows.get(key);
    if (!row) {
      row = { case: caseName, system, figures: new Map(), lost: [], duplicated: [] };
      this.#rows.set(key, row);
    }
    for (const f of figures) {
      let figure = row.figures.get(f.name);
      if (!figure) {
        figure = { name: f.name, unit: f.unit, runs: [] };
        row.figures.set(f.name, figure);
      }
      if (f.value !== undefined && Number.isFinite(f.value)) figure.runs.push(f.value);
    }
    row.lost.push(integrity.lost);
    row.duplicated.push(integrity.duplicated);
  }

  rows(): ResultRow[] {
    return [...this.#rows.values()].map((r) => ({
      scenario: this.#scenario,
      case: r.case,
      system: r.system,
      figures: [...r.figures.values()],
      lost: r.lost,
      duplicated: r.duplicated,
    }));
  }
}

import type { ScenarioId, ScenarioResult } from './types.js';

/**
 * The runs of one figure of one row, the one way the targets and the analysis read results.
 * `caseName` is matched exactly; undefined takes the system's first row in the scenario (for the
 * scenarios with one case). Undefined when there is no such row or figure, or no run measured it.
 */
export function runsOf(
  results: readonly ScenarioResult[],
  scenario: ScenarioId,
  caseName: string | undefined,
  system: string,
  figure: string,
): number[] | undefined {
  const row = results
    .find((r) => r.scenario === scenario)
    ?.rows.find((r) => (caseName === undefined || r.case === caseName) && r.system === system);
  const runs = row?.figures.find((f) => f.name === figure)?.runs;
  return runs && runs.length > 0 ? [...runs] : undefined;
}

/** `op` of run i of `a` and run i of `b` (which ran right next to each other), for every i both have. */
export function pairwise(
  a: readonly number[] | undefined,
  b: readonly number[] | undefined,
  op: (x: number, y: number) => number,
): number[] | undefined {
  if (!a || !b) return undefined;
  const n = Math.min(a.length, b.length);
  return Array.from({ length: n }, (_, i) => op(a[i] as number, b[i] as number));
}

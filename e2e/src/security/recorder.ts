// Shared by the security and race suites: result recording, violation lists, tallies.

// Results are recorded the way the scenario suites record theirs.
export { ScenarioRecorder as SuiteRecorder, type Figures } from '../scenarios/support.js';

/** Invariant violations found by a scenario; `assertNone` fails it with a readable summary. */
export class Violations {
  readonly #items: string[] = [];

  add(message: string): void {
    this.#items.push(message);
  }

  get count(): number {
    return this.#items.length;
  }

  assertNone(what: string): void {
    if (this.#items.length === 0) return;
    const shown = this.#items.slice(0, 8).map((m) => m.slice(0, 240));
    throw new Error(
      `${what}: ${this.#items.length} violation(s): ${shown.join(' | ')}${this.#items.length > 8 ? ' | …' : ''}`,
    );
  }
}

/** Counts values by key, as "k1: n1, k2: n2". */
export function tally(values: Iterable<string | number>): string {
  const counts = new Map<string, number>();
  for (const v of values) counts.set(String(v), (counts.get(String(v)) ?? 0) + 1);
  return [...counts.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, n]) => `${k}: ${n}`)
    .join(', ');
}

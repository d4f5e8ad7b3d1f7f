// Collects a suite's scenario results and writes its SuiteResult (e2e/src/report/results.ts).
import type { Sql } from '@sluice/core';
import { profile, recordSuiteResult, type ScenarioResult } from '../report/results.js';

export type Figures = Record<string, number | string>;

export class SuiteRecorder {
  readonly #suite: string;
  readonly #startedAt = new Date();
  readonly #scenarios: ScenarioResult[] = [];
  /** Inputs and faults injected, by class (SuiteResult.faults). */
  readonly faults: Record<string, number> = {};
  /** Events appended by the suite's writers (SuiteResult.events). */
  events: { appended: number; committed: number; aborted: number } | undefined;

  constructor(suite: string) {
    this.#suite = suite;
  }

  /**
   * Runs one scenario: `body` fills in its figures and throws when an invariant is violated. The
   * scenario is recorded either way (with the failure), and the error is rethrown for vitest.
   */
  async scenario(
    id: string,
    title: string,
    invariants: readonly string[],
    body: (figures: Figures) => Promise<void>,
  ): Promise<void> {
    const figures: Figures = {};
    try {
      await body(figures);
      this.#scenarios.push({ id, title, invariants, figures, ok: true });
    } catch (error) {
      const failure = error instanceof Error ? error.message : String(error);
      this.#scenarios.push({ id, title, invariants, figures, ok: false, failure: failure.slice(0, 600) });
      throw error;
    }
  }

  async write(sql: Sql): Promise<void> {
    const [row] = await sql<{ version: string }[]>`select current_setting('server_version') as version`;
    await recordSuiteResult({
      suite: this.#suite,
      profile: profile(),
      startedAt: this.#startedAt.toISOString(),
      durationMs: Date.now() - this.#startedAt.getTime(),
      ...(row ? { postgresVersion: row.version } : {}),
      ...(this.events ? { events: this.events } : {}),
      ...(Object.keys(this.faults).length > 0 ? { faults: this.faults } : {}),
      scenarios: this.#scenarios,
    });
  }
}

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

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

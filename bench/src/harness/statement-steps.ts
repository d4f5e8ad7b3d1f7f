import { formatFigure } from '../report/format.js';
import { percentile } from './stats.js';

/**
 * When a pool sent each statement, through postgres.js's `debug` hook (called as a statement is
 * written to its connection): a timestamp and a reference to the statement's text, into buffers
 * allocated up front, so the hook allocates nothing while it is measured. Statements past the
 * capacity are not recorded: the paths that needed them are left incomplete, and counted as such.
 */
export class StatementLog {
  readonly #times: Float64Array;
  readonly #texts: string[];
  #count = 0;

  constructor(capacity: number) {
    this.#times = new Float64Array(capacity);
    this.#texts = new Array<string>(capacity).fill('');
  }

  /** The `debug` option of the pool to watch. */
  readonly debug = (_connection: number, text: string): void => {
    const i = this.#count;
    if (i >= this.#times.length) return;
    this.#times[i] = performance.now();
    this.#texts[i] = text;
    this.#count = i + 1;
  };

  /** The send times of the statements `classify` puts in each kind, ascending. */
  byKind<K extends string>(classify: (text: string) => K | undefined): Map<K, number[]> {
    const kinds = new Map<K, number[]>();
    for (let i = 0; i < this.#count; i++) {
      const kind = classify(this.#texts[i] as string);
      if (kind === undefined) continue;
      let times = kinds.get(kind);
      if (!times) {
        times = [];
        kinds.set(kind, times);
      }
      times.push(this.#times[i] as number);
    }
    return kinds;
  }
}

/** The first of the ascending `times` at or after `from`, if it is at or before `to`. */
export function firstBetween(
  times: readonly number[] | undefined,
  from: number,
  to: number,
): number | undefined {
  if (!times) return undefined;
  let lo = 0;
  let hi = times.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if ((times[mid] as number) < from) lo = mid + 1;
    else hi = mid;
  }
  const found = times[lo];
  return found !== undefined && found <= to ? found : undefined;
}

/** One step of a path: from the previous point to this one. */
export interface Step {
  readonly label: string;
}

/**
 * The time each step of a path took, per run: `add` one path (the times its points were reached,
 * in step order, the start first) at a time; `endRun` closes a run.
 */
export class StepTimes {
  readonly #steps: readonly Step[];
  #current: number[][];
  #paths = 0;
  readonly #runs: { p50: number[]; p99: number[]; paths: number; of: number }[] = [];

  constructor(steps: readonly Step[]) {
    this.#steps = steps;
    this.#current = steps.map(() => []);
  }

  add(points: readonly number[]): void {
    if (points.length !== this.#steps.length + 1)
      throw new Error('StepTimes.add: one point per step, plus the start');
    for (let i = 0; i < this.#steps.length; i++) {
      (this.#current[i] as number[]).push((points[i + 1] as number) - (points[i] as number));
    }
    this.#paths++;
  }

  /** `of`: the events of the run, whether or not their path took every step. */
  endRun(of: number): void {
    this.#runs.push({
      p50: this.#current.map((d) => percentile(d, 50)),
      p99: this.#current.map((d) => percentile(d, 99)),
      paths: this.#paths,
      of,
    });
    this.#current = this.#steps.map(() => []);
    this.#paths = 0;
  }

  /** A Markdown table: each step's p50 and p99, median (min–max) over the runs. */
  table(): string {
    const fmt = (runs: readonly number[]) => formatFigure({ name: '', unit: '', runs });
    const lines = ['| step | p50 (ms) | p99 (ms) |', '| --- | --- | --- |'];
    this.#steps.forEach((step, i) => {
      lines.push(
        `| ${step.label} | ${fmt(this.#runs.map((r) => r.p50[i] as number))} | ${fmt(this.#runs.map((r) => r.p99[i] as number))} |`,
      );
    });
    const counts = this.#runs.map((r) => `${r.paths} of ${r.of}`).join(', ');
    lines.push('', `Events whose path took every step, run by run: ${counts}.`);
    return lines.join('\n');
  }
}

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

/** The statements of a Sluice dispatcher that the benchmark counts or times, by their text. */
export type SluiceStatement = 'begin' | 'pre-check' | 'lock' | 'turn start' | 'savepoint';

/**
 * What a statement a dispatcher's pool sent is, by its text (undefined: none of these): BEGIN, the
 * idle pre-check (queries/consumers.ts, precheckConsumers), the row lock of a turn (lockConsumer),
 * the committed turn-start record (queries/turn-starts.ts, recordTurnStart), a SAVEPOINT.
 */
export function sluiceStatement(text: string): SluiceStatement | undefined {
  if (text.startsWith('begin')) return 'begin';
  if (text.startsWith('savepoint')) return 'savepoint';
  if (text.includes(' as quiet')) return 'pre-check';
  if (text.includes('for update of c skip locked')) return 'lock';
  if (text.includes('async_commit') && text.includes('turn_starts')) return 'turn start';
  return undefined;
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

/** A point of a path: the moment a kind of statement was sent (or the start, or the handler). */
export interface PathPoint<K extends string> {
  readonly kind: K;
  readonly at: number;
}

/** One step of a path: from one point to the next one the path took. */
export interface Step<K extends string> {
  readonly from: K;
  readonly to: K;
  readonly label: string;
}

/** A point some paths take between `from` and `to` and others skip. */
export interface OptionalPoint<K extends string> {
  readonly via: K;
  readonly from: K;
  readonly to: K;
}

/** Per run, for an optional point: how many timed paths took it, and from → to with and without it. */
export interface OptionalRun {
  readonly took: number;
  readonly of: number;
  readonly p50With: number;
  readonly p50Without: number;
}

/**
 * The time each step of a path took, per run: `add` one path (its points in order, the start
 * first) at a time; `endRun` closes a run. A path may skip optional points: its steps are then
 * the ones between the points it took (a step "from → to" that spans the skipped point), and each
 * step counts the paths that took it.
 */
export class StepTimes<K extends string> {
  readonly #steps: readonly Step<K>[];
  readonly #optional: readonly OptionalPoint<K>[];
  #current: number[][];
  #currentOptional: { with: number[]; without: number[] }[];
  #paths = 0;
  readonly #runs: {
    p50: number[];
    p99: number[];
    took: number[];
    paths: number;
    of: number;
    optional: OptionalRun[];
  }[] = [];

  constructor(steps: readonly Step<K>[], optional: readonly OptionalPoint<K>[] = []) {
    this.#steps = steps;
    this.#optional = optional;
    this.#current = steps.map(() => []);
    this.#currentOptional = optional.map(() => ({ with: [], without: [] }));
  }

  add(path: readonly PathPoint<K>[]): void {
    const indexes: number[] = [];
    for (let i = 1; i < path.length; i++) {
      const from = (path[i - 1] as PathPoint<K>).kind;
      const to = (path[i] as PathPoint<K>).kind;
      const index = this.#steps.findIndex((s) => s.from === from && s.to === to);
      if (index < 0) throw new Error(`StepTimes.add: no step ${from} → ${to}`);
      indexes.push(index);
    }
    indexes.forEach((index, i) => {
      (this.#current[index] as number[]).push(
        (path[i + 1] as PathPoint<K>).at - (path[i] as PathPoint<K>).at,
      );
    });
    this.#optional.forEach((o, i) => {
      const from = path.find((p) => p.kind === o.from);
      const to = path.find((p) => p.kind === o.to);
      if (!from || !to) return;
      const bucket = this.#currentOptional[i] as { with: number[]; without: number[] };
      (path.some((p) => p.kind === o.via) ? bucket.with : bucket.without).push(to.at - from.at);
    });
    this.#paths++;
  }

  /** `of`: the events of the run, whether or not their path was found. */
  endRun(of: number): void {
    this.#runs.push({
      p50: this.#current.map((d) => percentile(d, 50)),
      p99: this.#current.map((d) => percentile(d, 99)),
      took: this.#current.map((d) => d.length),
      paths: this.#paths,
      of,
      optional: this.#currentOptional.map((b) => ({
        took: b.with.length,
        of: b.with.length + b.without.length,
        p50With: percentile(b.with, 50),
        p50Without: percentile(b.without, 50),
      })),
    });
    this.#current = this.#steps.map(() => []);
    this.#currentOptional = this.#optional.map(() => ({ with: [], without: [] }));
    this.#paths = 0;
  }

  /** Per run: the p50 of step `from → to` (NaN in a run where no path took it). */
  p50Of(from: K, to: K): number[] {
    const index = this.#steps.findIndex((s) => s.from === from && s.to === to);
    return this.#runs.map((r) => r.p50[index] ?? Number.NaN);
  }

  /** Per run: what the paths did at optional point `via`. */
  optionalRuns(via: K): OptionalRun[] {
    const index = this.#optional.findIndex((o) => o.via === via);
    return this.#runs.map((r) => r.optional[index] as OptionalRun);
  }

  /**
   * A Markdown table: each step's share of the timed paths that took it, and its p50 and p99 over
   * them, each a median (min–max) over the runs.
   */
  table(): string {
    const fmt = (runs: readonly number[], unit = '') => formatFigure({ name: '', unit, runs });
    const lines = [
      '| step | events that took this step (% of those timed) | p50 (ms) | p99 (ms) |',
      '| --- | --- | --- | --- |',
    ];
    this.#steps.forEach((step, i) => {
      const took = this.#runs.map((r) =>
        r.paths > 0 ? (100 * (r.took[i] as number)) / r.paths : Number.NaN,
      );
      lines.push(
        `| ${step.label} | ${fmt(took, '%')} | ${fmt(this.#runs.map((r) => r.p50[i] as number))} | ${fmt(this.#runs.map((r) => r.p99[i] as number))} |`,
      );
    });
    const counts = this.#runs.map((r) => `${r.paths} of ${r.of}`).join(', ');
    lines.push(
      '',
      `Events timed (their path found from the append call to the handler), run by run: ${counts}.`,
    );
    return lines.join('\n');
  }
}

// Shared by the scenario suites (docs/reliability.md §5): result recording, an on-demand
// OpenTelemetry metric reader and child processes (fresh schemas, consumer rows, a capturing logger
// and waiting on conditions come from @sluice/testing).
import type { ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import { cpus, loadavg } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  append,
  createDispatcher,
  silentLogger,
  transaction,
  type Consumer,
  type Dispatcher,
  type DispatcherOptions,
  type NewEvent,
  type Sql,
} from '@sluice/core';
import { tables } from '@sluice/core/internal';
import { profile, recordSuiteResult, type ScenarioResult } from '../report/results.js';
import { random, spawnScript } from '../rig/child.js';

export type Figures = Record<string, number | string>;

/** Collects a suite's scenarios and writes its SuiteResult (report/results.ts) once, after the file. */
export class ScenarioRecorder {
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
   * Runs one scenario: `body` fills in its figures and throws when an invariant breaks. Recorded
   * either way (with the failure); the error is rethrown so the vitest test fails too.
   */
  async run(
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
      this.#scenarios.push({ id, title, invariants, figures, ok: false, failure: failure.slice(0, 800) });
      throw error;
    }
  }

  async write(sql: Sql): Promise<void> {
    let version: string | undefined;
    try {
      const [row] = await sql<{ version: string }[]>`select current_setting('server_version') as version`;
      version = row?.version;
    } catch {
      version = undefined;
    }
    await recordSuiteResult({
      suite: this.#suite,
      profile: profile(),
      startedAt: this.#startedAt.toISOString(),
      durationMs: Date.now() - this.#startedAt.getTime(),
      ...(version === undefined ? {} : { postgresVersion: version }),
      ...(this.events ? { events: this.events } : {}),
      ...(Object.keys(this.faults).length > 0 ? { faults: this.faults } : {}),
      scenarios: this.#scenarios,
    });
  }
}

/** A dispatcher without logs and, unless `extra` asks for it, without LISTEN. */
export function quietDispatcher(
  sql: Sql,
  schema: string,
  consumers: readonly Consumer[],
  extra: Partial<DispatcherOptions> = {},
): Dispatcher {
  return createDispatcher({ sql, schema, consumers, logger: silentLogger, listen: false, ...extra });
}

/** Throws `message` (with the figures' context) when `condition` is false: an invariant check. */
export function check(condition: boolean, message: string): asserts condition {
  if (!condition) throw new Error(message);
}

/** The gap ranges of a consumer, straight from the gaps table. */
export async function gapRows(
  sql: Sql,
  schema: string,
  name: string,
): Promise<{ from: bigint; to: bigint; fence: bigint | null }[]> {
  const t = tables(sql, schema);
  const rows = await sql<{ from_id: string; to_id: string; fence: string | null }[]>`
    select from_id::text, to_id::text, fence::text from ${t.gaps}
    where consumer_name = ${name} order by from_id`;
  return rows.map((r) => ({
    from: BigInt(r.from_id),
    to: BigInt(r.to_id),
    fence: r.fence === null ? null : BigInt(r.fence),
  }));
}

/** Highest committed id of a schema's log. */
export async function head(sql: Sql, schema: string): Promise<bigint> {
  const t = tables(sql, schema);
  const [row] = await sql<{ head: string }[]>`select coalesce(max(id), 0)::text as head from ${t.events}`;
  return BigInt(row?.head ?? '0');
}

/** Whether the box is busy (other suites share its two cores): timing targets are then reported, not asserted. */
export function machineLoaded(): boolean {
  return (loadavg()[0] ?? 0) > cpus().length * 0.75;
}

export function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] as number;
}

export const round = (value: number, digits = 0) => Number(value.toFixed(digits));

// ---------------------------------------------------------------------------------------------
// OpenTelemetry: an in-memory MeterProvider from @opentelemetry/sdk-metrics with a reader that
// collects on demand (as in packages/core/src/telemetry/telemetry.db.test.ts). The SDK is a dev
// dependency of @sluice/core, not of e2e (whose dependencies this suite must not change), so it is
// loaded from core's node_modules.

interface DataPointLike {
  readonly attributes: Record<string, unknown>;
  readonly value: unknown;
}
interface MetricDataLike {
  readonly descriptor: { readonly name: string };
  readonly dataPoints: readonly DataPointLike[];
}
interface CollectionLike {
  readonly resourceMetrics: {
    readonly scopeMetrics: readonly { readonly metrics: readonly MetricDataLike[] }[];
  };
}
interface ReaderLike {
  collect(): Promise<CollectionLike>;
}
interface SdkMetricsModule {
  readonly MeterProvider: new (options: { readers: ReaderLike[] }) => object;
  readonly MetricReader: new () => ReaderLike;
}

export interface MetricsProbe {
  readonly meterProvider: NonNullable<DispatcherOptions['meterProvider']>;
  /** Collects now: the value of a gauge or counter for the points matching `attributes` (summed), or undefined. */
  value(name: string, attributes?: Record<string, unknown>): Promise<number | undefined>;
}

export function metricsProbe(): MetricsProbe {
  const requireFromCore = createRequire(new URL('../../../packages/core/package.json', import.meta.url));
  const sdk = requireFromCore('@opentelemetry/sdk-metrics') as SdkMetricsModule;
  class OnDemandReader extends sdk.MetricReader {
    protected onShutdown(): Promise<void> {
      return Promise.resolve();
    }
    protected onForceFlush(): Promise<void> {
      return Promise.resolve();
    }
  }
  const reader = new OnDemandReader();
  const meterProvider = new sdk.MeterProvider({ readers: [reader] }) as MetricsProbe['meterProvider'];
  return {
    meterProvider,
    async value(name, attributes = {}) {
      const { resourceMetrics } = await reader.collect();
      const metric = resourceMetrics.scopeMetrics
        .flatMap((s) => s.metrics)
        .find((m) => m.descriptor.name === name);
      if (!metric) return undefined;
      const points = metric.dataPoints.filter((p) =>
        Object.entries(attributes).every(([key, value]) => p.attributes[key] === value),
      );
      if (points.length === 0) return undefined;
      return points.reduce((sum, p) => sum + (typeof p.value === 'number' ? p.value : 0), 0);
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Child processes: `node --conditions=@sluice/source --import tsx <script>` (tsx's loader in the
// same process, so the pid we hold is the dispatcher's own and SIGKILL reaches it), each in its own
// process group; every one still alive is killed by killChildren() (afterAll).

const live = new Set<ChildProcess>();

export interface Child {
  readonly pid: number;
  /** Resolves with the exit code and signal. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Resolves once the child printed a line starting with `word`. */
  announced(word: string): Promise<string>;
  readonly output: () => string;
  kill(signal: NodeJS.Signals): void;
}

export function startChild(script: URL, config: object): Child {
  const { child, pid } = spawnScript(script, { ...config, parentPid: process.pid }, 'pipe');
  live.add(child);
  let out = '';
  const waiters: { word: string; resolve: (line: string) => void }[] = [];
  const onData = (chunk: Buffer) => {
    out += chunk.toString('utf8');
    for (const waiter of [...waiters]) {
      const line = out.split('\n').find((l) => l.startsWith(waiter.word));
      if (line !== undefined) {
        waiters.splice(waiters.indexOf(waiter), 1);
        waiter.resolve(line);
      }
    }
  };
  child.stdout?.on('data', onData);
  child.stderr?.on('data', (chunk: Buffer) => {
    out += chunk.toString('utf8');
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on('exit', (code, signal) => {
      live.delete(child);
      resolve({ code, signal });
    });
  });
  return {
    pid,
    exited,
    output: () => out,
    announced: (word) =>
      new Promise<string>((resolve, reject) => {
        const line = out.split('\n').find((l) => l.startsWith(word));
        if (line !== undefined) {
          resolve(line);
          return;
        }
        waiters.push({ word, resolve });
        void exited.then(({ code, signal }) => {
          reject(
            new Error(
              `child exited (${code ?? signal ?? '?'}) before announcing ${word}:\n${out.slice(-2000)}`,
            ),
          );
        });
      }),
    kill(signal) {
      try {
        process.kill(-pid, signal);
      } catch {
        // already gone
      }
    },
  };
}

/** SIGKILLs every child process group still alive and waits for their exits. */
export async function killChildren(): Promise<void> {
  const waiting = [...live].map(
    (child) =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) {
          resolve();
          return;
        }
        child.once('exit', () => {
          resolve();
        });
        try {
          if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
        } catch {
          resolve();
        }
      }),
  );
  await Promise.all(waiting);
}

/**
 * Writers appending until stop(), each transaction 1–3 events made by `event` (writer, index in the
 * transaction, the writers' seeded random), a fifth of the transactions rolled back, a pause of up
 * to `pauseMs` between them; `state` counts what committed and what rolled back.
 */
export function writers(
  sql: Sql,
  schema: string,
  options: {
    readonly count: number;
    readonly seed: number;
    readonly pauseMs: number;
    readonly event: (writer: number, index: number, rand: () => number) => NewEvent;
  },
) {
  const rand = random(options.seed);
  const state = { running: true, committed: 0, rolledBack: 0 };
  const loops = Array.from({ length: options.count }, async (_, w) => {
    while (state.running) {
      const rollback = rand() < 0.2;
      const events = Array.from({ length: 1 + Math.floor(rand() * 3) }, (_e, i) => options.event(w, i, rand));
      try {
        await transaction(sql, async (tx) => {
          await append(tx, events, { schema });
          if (rollback) throw new Error('rolled back on purpose');
        });
        state.committed += events.length;
      } catch {
        state.rolledBack += events.length;
      }
      await sleep(rand() * options.pauseMs);
    }
  });
  return {
    state,
    async stop() {
      state.running = false;
      await Promise.all(loops);
    },
  };
}

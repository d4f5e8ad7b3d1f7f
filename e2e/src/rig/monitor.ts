// Samples every consumer's persisted state every ~150 ms (I4: cursors never move backwards), the
// log head, and the largest pending-gap count seen. Survives a database restart: failed samples are
// counted and sampling goes on.
import postgres from 'postgres';
import { now } from './clock.js';
import type { CursorSample } from './checker.js';

export interface ConsumerState {
  readonly name: string;
  readonly cursor: number;
  readonly gapCount: number;
  readonly status: string;
}

export interface MonitorState {
  readonly at: number;
  readonly head: number;
  readonly consumers: readonly ConsumerState[];
}

/** A dispatcher session left idle inside a transaction (a turn whose process stopped driving it). */
export interface StuckSession {
  readonly pid: number;
  readonly app: string;
  /** Longest time seen idle in transaction, in ms. */
  idleMs: number;
  readonly query: string;
  readonly firstSeenAt: number;
}

const SAMPLE_TIMEOUT_MS = 5_000;

class SampleTimeout extends Error {}

/** Rejects with a SampleTimeout when `promise` has not settled within `ms`. */
export async function timeLimit<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          reject(new SampleTimeout(`no answer within ${ms} ms`));
        }, ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

export class Monitor {
  readonly samples: CursorSample[] = [];
  maxGapCount = 0;
  maxGapConsumer = '';
  failedSamples = 0;
  /**
   * Samples that never settled: the monitor then drops its connection and opens a new one. (A
   * postgres.js query can stay pending for ever after the server restarts; the observer must not
   * hang with it.)
   */
  hungSamples = 0;
  /** Statuses seen, per consumer (a 'dead' here means a consumer stopped). */
  readonly statuses = new Map<string, Set<string>>();
  /** Dispatcher sessions seen idle in transaction for over 5 s, by backend pid. */
  readonly stuckSessions = new Map<number, StuckSession>();
  #latest: MonitorState | undefined;
  #tick = 0;
  #running = false;
  #loop: Promise<void> | undefined;
  #sql: postgres.Sql;
  readonly #url: string;
  readonly #intervalMs: number;

  constructor(url: string, intervalMs = 150) {
    this.#url = url;
    this.#intervalMs = intervalMs;
    this.#sql = this.#connect();
  }

  #connect(): postgres.Sql {
    return postgres(this.#url, {
      max: 1,
      connect_timeout: 2,
      // A hung one is ended at once, maybe during postgres.js 3.4.9's array-type fetch on connect,
      // whose rejection would then have no handler.
      fetch_types: false,
      onnotice: () => undefined,
      connection: { application_name: 'chaos-monitor' },
    });
  }

  /** Runs a query with a time limit; a query that hangs costs the connection, not the monitor. */
  async #query<T>(run: (sql: postgres.Sql) => Promise<T>): Promise<T> {
    const sql = this.#sql;
    try {
      return await timeLimit(run(sql), SAMPLE_TIMEOUT_MS);
    } catch (error) {
      if (error instanceof SampleTimeout && this.#sql === sql) {
        this.hungSamples += 1;
        this.#sql = this.#connect();
        void sql.end({ timeout: 0 });
      }
      throw error;
    }
  }

  get latest(): MonitorState | undefined {
    return this.#latest;
  }

  start(): void {
    this.#running = true;
    this.#loop = this.#run();
  }

  async stop(): Promise<void> {
    this.#running = false;
    await this.#loop;
    await this.#sql.end({ timeout: 2 });
  }

  /** Takes one sample now (also used after the run). */
  async sample(): Promise<MonitorState | undefined> {
    try {
      const rows = await this.#query(
        (sql) => sql<{ name: string; cursor: string; gap_count: number; status: string; head: string }[]>`
          select case when instance_id = '*' then name else name || '@' || instance_id end as name,
                 cursor::text as cursor, gap_count, status,
                 (select coalesce(max(id), 0) from sluice.events)::text as head
          from sluice.consumers where left(instance_id, 1) = '*' order by name`,
      );
      const at = now();
      // A consumer run as lanes is one row (and one series of samples) per lane: `name@*k/N`.
      const consumers = rows.map((r) => ({
        name: r.name,
        cursor: Number(r.cursor),
        gapCount: r.gap_count,
        status: r.status,
      }));
      for (const c of consumers) {
        this.samples.push({ t: at, consumer: c.name, cursor: c.cursor });
        if (c.gapCount > this.maxGapCount) {
          this.maxGapCount = c.gapCount;
          this.maxGapConsumer = c.name;
        }
        let seen = this.statuses.get(c.name);
        if (!seen) this.statuses.set(c.name, (seen = new Set()));
        seen.add(c.status);
      }
      this.#latest = { at, head: Number(rows[0]?.head ?? 0), consumers };
      return this.#latest;
    } catch {
      this.failedSamples += 1;
      return undefined;
    }
  }

  /** A turn's session never sits idle in its transaction for long: handlers here take microseconds. */
  async sampleStuckSessions(): Promise<void> {
    try {
      const rows = await this.#query(
        (sql) => sql<{ pid: number; app: string; idle_ms: number; query: string }[]>`
          select pid, application_name as app, query,
                 (extract(epoch from clock_timestamp() - state_change) * 1000)::float8 as idle_ms
          from pg_stat_activity
          where application_name like 'disp-%' and state = 'idle in transaction'
            and state_change < clock_timestamp() - interval '5 seconds'`,
      );
      for (const r of rows) {
        const known = this.stuckSessions.get(r.pid);
        if (known) known.idleMs = Math.max(known.idleMs, r.idle_ms);
        else
          this.stuckSessions.set(r.pid, {
            pid: r.pid,
            app: r.app,
            idleMs: r.idle_ms,
            query: r.query.replace(/\s+/g, ' ').slice(0, 160),
            firstSeenAt: now(),
          });
      }
    } catch {
      this.failedSamples += 1;
    }
  }

  async #run(): Promise<void> {
    while (this.#running) {
      const started = now();
      await this.sample();
      if (++this.#tick % 5 === 0) await this.sampleStuckSessions();
      const wait = this.#intervalMs - (now() - started);
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }
}

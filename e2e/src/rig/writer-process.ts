// A chaos writer process (`writer-N`), started by the supervisor with
// `tsx --conditions=@sluice/source writer-process.ts` and CHILD_CONFIG set. Several sessions append
// 1–5 events per transaction until the process's quota of appended events is reached: a share of
// the transactions roll back after their insert, a share hold the transaction open before
// committing, the rest sleep 0–50 ms between insert and commit. Each outcome is appended to the
// JSONL history once known; connection errors (backend killed, server restarting) are retried with
// backoff, so writers ride through every fault of the run.
//
// Each session has a connection of its own and a watchdog: after a backend of a writer is
// terminated mid-transaction, postgres.js can leave a query stranded for ever (seen in the chaos
// run: the backend 'active' in ClientRead after Parse/Describe, the client never sending Bind). A
// transaction still unsettled after TRANSACTION_WATCHDOG_MS is counted as hung, its connection is
// destroyed (so it cannot commit later) and the session goes on with a new one.
import { append, transaction, type NewEvent } from '@sluice/core';
import postgres from 'postgres';
import { childConfig, random, sleep } from './child.js';
import { now } from './clock.js';
import { JsonlWriter } from './jsonl.js';

export interface WriterChildConfig {
  readonly url: string;
  /** `writer-N`: the pool's application_name. */
  readonly writerId: string;
  readonly file: string;
  /** Concurrent transactions (pool connections). */
  readonly sessions: number;
  /** Events to append (committed or not) before stopping. */
  readonly quota: number;
  readonly rollbackRate: number;
  readonly slowRate: number;
  readonly seed: number;
  readonly parentPid: number;
}

/** One transaction's outcome as recorded by a writer. */
export interface WriteLine {
  readonly w: string;
  readonly ids: readonly number[];
  /**
   * 'commit': COMMIT succeeded. 'rollback': rolled back on purpose, or failed before COMMIT was sent
   * (it cannot have committed). 'unknown': COMMIT was sent and failed (it may have committed).
   */
  readonly outcome: 'commit' | 'rollback' | 'unknown';
  /** When the outcome was known (clock.ts): after the commit became visible, for commits. */
  readonly t: number;
  /** When append() returned the ids (clock.ts): they were drawn before. */
  readonly a?: number;
  /** The error of an unintended failure. */
  readonly error?: string;
}

class IntendedRollback extends Error {}

const config = childConfig() as WriterChildConfig;
const out = new JsonlWriter(config.file);
const rand = random(config.seed);
const TRANSACTION_WATCHDOG_MS = 30_000;
const connect = () =>
  postgres(config.url, {
    max: 1,
    connect_timeout: 5,
    onnotice: () => undefined,
    connection: { application_name: config.writerId },
  });

let reserved = 0;
let errors = 0;
let hung = 0;
const pools = new Set<postgres.Sql>();

class Hung extends Error {}

async function session(s: number): Promise<void> {
  let sql = connect();
  pools.add(sql);
  let backoffMs = 100;
  let k = 0;
  while (reserved < config.quota) {
    const take = Math.min(1 + Math.floor(rand() * 5), config.quota - reserved);
    reserved += take;
    const roll = rand();
    const kind =
      roll < config.rollbackRate
        ? 'rollback'
        : roll < config.rollbackRate + config.slowRate
          ? 'slow'
          : 'normal';
    const events: NewEvent[] = Array.from({ length: take }, () => ({
      streamId: `${config.writerId}-${s}`,
      type: 'ChaosEvent',
      data: { s, k: k++ },
    }));
    // Set inside the transaction's callback (a closure, which narrowing does not follow).
    const state: { ids: number[] | undefined; drawnAt: number; committing: boolean } = {
      ids: undefined,
      drawnAt: 0,
      committing: false,
    };
    let watchdog: NodeJS.Timeout | undefined;
    try {
      const committed = transaction(sql, async (tx) => {
        state.ids = (await append(tx, events)).map((e) => Number(e.id));
        state.drawnAt = now();
        if (kind === 'rollback') {
          await sleep(rand() * 50);
          throw new IntendedRollback();
        }
        await sleep(kind === 'slow' ? 500 + rand() * 2500 : rand() * 50);
        state.committing = true;
      });
      committed.catch(() => undefined); // settled late (after the watchdog) or never: not unhandled
      await Promise.race([
        committed,
        new Promise<never>((_, reject) => {
          watchdog = setTimeout(() => {
            reject(new Hung(`transaction unsettled after ${TRANSACTION_WATCHDOG_MS} ms`));
          }, TRANSACTION_WATCHDOG_MS);
        }),
      ]);
      out.write({
        w: config.writerId,
        ids: state.ids ?? [],
        outcome: 'commit',
        t: now(),
        a: state.drawnAt,
      } satisfies WriteLine);
      backoffMs = 100;
    } catch (error) {
      if (error instanceof Hung) {
        hung += 1;
        console.log(`hung transaction (ids ${JSON.stringify(state.ids)}, committing ${state.committing})`);
        const stale = sql;
        pools.delete(stale);
        void stale.end({ timeout: 0 });
        sql = connect();
        pools.add(sql);
      }
      const intended = error instanceof IntendedRollback;
      if (state.ids === undefined) reserved -= take;
      else {
        out.write({
          w: config.writerId,
          ids: state.ids,
          outcome: intended || !state.committing ? 'rollback' : 'unknown',
          t: now(),
          a: state.drawnAt,
          ...(intended ? {} : { error: (error as Error).message }),
        } satisfies WriteLine);
      }
      if (!intended) {
        errors += 1;
        await sleep(backoffMs);
        backoffMs = Math.min(backoffMs * 2, 2000);
      }
    } finally {
      clearTimeout(watchdog);
    }
  }
}

await Promise.all(Array.from({ length: config.sessions }, (_, s) => session(s)));
await Promise.all([...pools].map((p) => p.end({ timeout: 5 })));
out.close();
console.log(`CHAOS DONE ${reserved} ${errors} ${hung}`);
process.exit(0);

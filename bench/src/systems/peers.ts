import {
  getPostgreSQLEventStore,
  postgreSQLEventStoreConsumer,
  type PostgresEventStore,
} from '@event-driven-io/emmett-postgresql';
import { Logger, makeWorkerUtils, run, type Runner, type WorkerUtils } from 'graphile-worker';
import pg from 'pg';

export const silentGraphileLogger = new Logger(() => () => undefined);

/**
 * Emmett (@event-driven-io/emmett-postgresql 0.42.0): its PostgreSQL event store consumer with one
 * reactor. Batch size 100 as Sluice; pullingFrequencyInMs 1 instead of the default 50 (the pause
 * after every batch that still had messages left: 50 ms caps it at 2k events/s by construction).
 * Its reactor stores the checkpoint after every message, inside one transaction per batch.
 */
export const EMMETT_SETTINGS = { batchSize: 100, pullingFrequencyInMs: 1 } as const;

export interface EmmettRunner {
  start(): void;
  close(): Promise<void>;
}

export function emmettConsumer(url: string, onSeq: (seq: number) => void): EmmettRunner {
  const consumer = postgreSQLEventStoreConsumer({ connectionString: url, pulling: { ...EMMETT_SETTINGS } });
  consumer.reactor<{ type: string; data: { seq: number } }>({
    processorId: 'bench',
    eachMessage: (message) => {
      onSeq(message.data.seq);
      return Promise.resolve();
    },
  });
  let started: Promise<void> | undefined;
  return {
    start() {
      started = consumer.start().catch((error: unknown) => {
        process.stderr.write(`[emmett] ${(error as Error).message}\n`);
      });
    },
    async close() {
      await consumer.close();
      await started;
    },
  };
}

export function emmettStore(url: string): PostgresEventStore {
  return getPostgreSQLEventStore(url);
}

/**
 * graphile-worker 0.17.3 at its published best settings (worker.graphile.org/docs/performance):
 * concurrentJobs 24, maxPoolSize 25, localQueue size 500, completeJobBatchDelay 0,
 * failJobBatchDelay 0. Everything else at its defaults (pollInterval 2000 ms, LISTEN for new jobs,
 * prepared statements on).
 */
export const GRAPHILE_SETTINGS = {
  concurrency: 24,
  maxPoolSize: 25,
  localQueue: { size: 500 },
  completeJobBatchDelay: 0,
  failJobBatchDelay: 0,
} as const;

export interface GraphileRunner {
  stop(): Promise<void>;
}

/**
 * A pg pool of our own for graphile-worker: its own pools end without waiting (release() calls
 * pool.end() without awaiting it, after removing its error handlers), so a run database dropped
 * right after would kill their still-open connections with an unhandled 'error' event. Ours have
 * error handlers until they are closed, and closing them is awaited.
 */
function graphilePool(url: string, max: number): pg.Pool {
  const pgPool = new pg.Pool({ connectionString: url, max });
  // Errors of idle clients (their connection ending when the run's database is dropped) are not ours.
  pgPool.on('error', () => undefined);
  pgPool.on('connect', (client) => {
    client.on('error', () => undefined);
  });
  return pgPool;
}

/** How many jobs a worker runs at once and its pool (concurrency + 1, as in GRAPHILE_SETTINGS). */
export interface GraphileConcurrency {
  readonly concurrency: number;
  readonly maxPoolSize: number;
}

/** graphile-worker's published settings at another concurrency: its pool one connection larger. */
export function graphileAt(concurrency: number): GraphileConcurrency {
  return { concurrency, maxPoolSize: concurrency + 1 };
}

/** Runs a worker on a pool of our own (maxPoolSize connections), closed (awaited) by stop(). */
export function graphileWorker(url: string, onSeq: (seq: number) => void): Promise<GraphileRunner> {
  return graphileTaskWorker(
    url,
    (job) => {
      onSeq(job.seq);
      return Promise.resolve();
    },
    GRAPHILE_SETTINGS,
  );
}

/**
 * A worker whose one task ('bench') runs `task` with each job's payload, at `settings`' concurrency
 * and pool, on a pool of our own closed (awaited) by stop(). The rest as in GRAPHILE_SETTINGS.
 */
export async function graphileTaskWorker(
  url: string,
  task: (job: { seq: number } & Record<string, unknown>) => Promise<void>,
  settings: GraphileConcurrency,
): Promise<GraphileRunner> {
  const pgPool = graphilePool(url, settings.maxPoolSize);
  let runner: Runner;
  try {
    runner = await startGraphile(pgPool, task, settings.concurrency);
  } catch (error) {
    await pgPool.end();
    throw error;
  }
  return {
    async stop() {
      await runner.stop();
      await pgPool.end();
    },
  };
}

function startGraphile(
  pgPool: pg.Pool,
  task: (job: { seq: number } & Record<string, unknown>) => Promise<void>,
  concurrency: number,
): Promise<Runner> {
  return run({
    pgPool,
    concurrency,
    noHandleSignals: true,
    logger: silentGraphileLogger,
    taskList: {
      bench: (job) => task(job as { seq: number } & Record<string, unknown>),
    },
    preset: {
      worker: {
        localQueue: { size: GRAPHILE_SETTINGS.localQueue.size },
        completeJobBatchDelay: GRAPHILE_SETTINGS.completeJobBatchDelay,
        failJobBatchDelay: GRAPHILE_SETTINGS.failJobBatchDelay,
      },
    },
  });
}

export interface GraphileUtils {
  readonly utils: WorkerUtils;
  /** Releases the utils and closes their pool (awaited). */
  readonly close: () => Promise<void>;
}

/** WorkerUtils (addJob, addJobs, migrate) on a pool of our own of `max` connections. */
export async function graphileUtils(url: string, max = 2): Promise<GraphileUtils> {
  const pgPool = graphilePool(url, max);
  let utils: WorkerUtils;
  try {
    utils = await makeWorkerUtils({ pgPool, logger: silentGraphileLogger });
  } catch (error) {
    await pgPool.end();
    throw error;
  }
  return {
    utils,
    close: async () => {
      await utils.release();
      await pgPool.end();
    },
  };
}

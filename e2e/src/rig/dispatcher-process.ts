// A chaos dispatcher process (`disp-N`), started by the supervisor with
// `tsx --conditions=@sluice/source dispatcher-process.ts` and CHILD_CONFIG set. Every delivery is
// appended to this incarnation's JSONL file before the handler returns; transactional consumers
// also record it in chaos.deliveries through the turn's transaction. SIGTERM stops it cleanly
// (dispatcher.stop(), exit 0); SIGKILL is the fault under test.
import { consoleLogger, createDispatcher, type Consumer, type EventRecord } from '@sluice/core';
import { pgArray } from '@sluice/core/internal';
import postgres from 'postgres';
import { childConfig, sleep } from './child.js';
import { now } from './clock.js';
import { chaosConsumers } from './consumers.js';
import { JsonlWriter } from './jsonl.js';

export interface DispatcherChildConfig {
  readonly url: string;
  /** `disp-N`: the pool's application_name and the dispatcher's instanceId. */
  readonly instanceId: string;
  /** Incarnation number of this `disp-N` (1 for the first start, +1 per restart). */
  readonly generation: number;
  readonly file: string;
  readonly consumers: number;
  readonly pollIntervalMs: number;
  readonly batchSize: number;
  /** The dispatcher's maxBatchSize: a turn catching up grows its batch up to this. */
  readonly maxBatchSize: number;
  readonly concurrency: number;
  readonly poolMax: number;
  readonly parentPid: number;
}

/** One delivery as recorded by a dispatcher process. */
export interface DeliveryLine {
  /** Consumer. */
  readonly c: string;
  readonly id: number;
  /** Process incarnation, `disp-N#G`. */
  readonly p: string;
  /** When the handler was called (clock.ts). */
  readonly t: number;
  /**
   * When this process sent the lock statement of the turn that delivered the event: a lower bound
   * on the time of the turn's fetch (the fetch runs after the lock, in a later statement).
   */
  readonly f?: number;
  /** The consumer row that delivered it (ctx.instanceId: a lane's '*k/N'). */
  readonly l: string;
}

const config = childConfig() as DispatcherChildConfig;
const tag = `${config.instanceId}#${config.generation}`;
const out = new JsonlWriter(config.file);
const specs = chaosConsumers(config.consumers);
const names = new Set(specs.map((s) => s.name));

// The lock statement of a consumer's turn names the consumer and the row (its '*' row, or a lane's
// '*k/N'); a process runs at most one turn per row at a time, so the last lock statement sent for a
// row belongs to its current turn.
const turnLockedAt = new Map<string, number>();
/** Turns started per consumer (lock statements sent), logged every few seconds as evidence. */
const turns: Record<string, number> = {};
function onQuery(_connection: number, query: string, parameters: unknown[]): void {
  if (!query.includes('skip locked')) return;
  const [name, instanceId] = parameters.filter((p): p is string => typeof p === 'string').slice(-2);
  if (name === undefined || instanceId === undefined || !names.has(name)) return;
  turnLockedAt.set(`${name}|${instanceId}`, now());
  turns[name] = (turns[name] ?? 0) + 1;
}
const TURNS_EVERY_MS = 5_000;
setInterval(() => {
  console.log(`CHAOS TURNS ${JSON.stringify(turns)}`);
}, TURNS_EVERY_MS).unref();

const sql = postgres(config.url, {
  max: config.poolMax,
  connect_timeout: 5,
  // Logged: a WARNING such as "there is no transaction in progress" is evidence of a statement of a
  // turn running outside its transaction.
  onnotice: (notice) => {
    console.log(`[notice] ${String(notice['severity'])}: ${String(notice['message'])}`);
  },
  connection: { application_name: config.instanceId },
  debug: onQuery,
});

function record(consumer: string, instanceId: string, events: readonly EventRecord[]): void {
  const t = now();
  const f = turnLockedAt.get(`${consumer}|${instanceId}`);
  out.write(
    ...events.map((e): DeliveryLine => ({
      c: consumer,
      id: Number(e.id),
      p: tag,
      t,
      ...(f === undefined ? {} : { f }),
      l: instanceId,
    })),
  );
}

const consumers: Consumer[] = specs.map((spec) => {
  const { name } = spec;
  if (!spec.transactional) {
    return {
      name,
      ordering: spec.ordering,
      lanes: spec.lanes,
      handler: (event: EventRecord, ctx) => {
        record(name, ctx.instanceId, [event]);
      },
      ...(spec.batch
        ? {
            batchHandler: (events: readonly EventRecord[], ctx) => {
              record(name, ctx.instanceId, events);
            },
          }
        : {}),
    };
  }
  return {
    name,
    ordering: spec.ordering,
    lanes: spec.lanes,
    transactional: true,
    handler: async (event, ctx) => {
      if (!ctx.tx) throw new Error('transactional consumer without ctx.tx');
      await ctx.tx`
        insert into chaos.deliveries (consumer, id) values (${name}, ${event.id.toString()}::bigint)
        on conflict do nothing`;
      record(name, ctx.instanceId, [event]);
    },
    ...(spec.batch
      ? {
          batchHandler: async (events, ctx) => {
            if (!ctx.tx) throw new Error('transactional consumer without ctx.tx');
            await ctx.tx`
              insert into chaos.deliveries (consumer, id)
              select ${name}, unnest(${pgArray(events.map((e) => e.id))}::bigint[])
              on conflict do nothing`;
            record(name, ctx.instanceId, events);
          },
        }
      : {}),
  } satisfies Consumer;
});

const dispatcher = createDispatcher({
  sql,
  consumers,
  instanceId: config.instanceId,
  pollIntervalMs: config.pollIntervalMs,
  batchSize: config.batchSize,
  maxBatchSize: config.maxBatchSize,
  concurrency: config.concurrency,
  listen: true,
  logger: consoleLogger,
});

// An object: the start loop below reads what the SIGTERM handler sets.
const state = { stopping: false };
process.on('SIGTERM', () => {
  if (state.stopping) return;
  state.stopping = true;
  void (async () => {
    const started = now();
    await dispatcher.stop();
    await sql.end({ timeout: 5 });
    out.close();
    console.log(`CHAOS TURNS ${JSON.stringify(turns)}`);
    console.log(`CHAOS STOPPED ${Math.round(now() - started)}`);
    process.exit(0);
  })().catch((error: unknown) => {
    console.error('stop failed', error);
    process.exit(1);
  });
});

// The database may be down (an immediate restart in progress): keep trying.
for (let attempt = 1; ; attempt++) {
  try {
    await dispatcher.start();
    break;
  } catch (error) {
    if (state.stopping) break;
    console.error(`start attempt ${attempt} failed: ${(error as Error).message}`);
    await sleep(Math.min(2000, 100 * 2 ** attempt));
  }
}
console.log(`CHAOS READY ${process.pid}`);

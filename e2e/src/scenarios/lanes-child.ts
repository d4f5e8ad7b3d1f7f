// A dispatcher process for the keyed-lane scenarios (lanes.reliability.test.ts), started with
// `node --conditions=@sluice/source --import tsx lanes-child.ts` and CHILD_CONFIG set. One consumer,
// `keyed`, run as `lanes` lanes; every handler call appends a JSON line to `file` (fs.writeSync: it
// survives a SIGKILL) before it returns. SIGTERM stops the dispatcher cleanly (exit 0).
import { closeSync, openSync, writeSync } from 'node:fs';
import { consoleLogger, createDispatcher, type EventRecord } from '@sluice/core';
import postgres from 'postgres';
import { childConfig, sleep } from '../rig/child.js';
import { now } from '../rig/clock.js';

export interface LanesChildConfig {
  readonly url: string;
  readonly schema: string;
  readonly file: string;
  /** The dispatcher's instance id (its connections are named after it). */
  readonly instanceId: string;
  readonly generation: number;
  readonly lanes: number;
  readonly concurrency: number;
  readonly batchSize: number;
  /** Each handler call awaits this long (a slow reactor keeps its lanes busy). */
  readonly handlerMs: number;
  readonly parentPid: number;
}

/** One delivery. */
export interface LaneDelivery {
  readonly id: string;
  /** The event's stream (its key). */
  readonly s: string;
  /** The lane that delivered it ('*' or '*k/N'). */
  readonly l: string;
  /** `instanceId#generation`. */
  readonly p: string;
  /** When the handler was called (rig/clock.ts). */
  readonly t: number;
}

const config = childConfig() as LanesChildConfig;
const tag = `${config.instanceId}#${config.generation}`;
const fd = openSync(config.file, 'a');

const sql = postgres(config.url, { max: 4, onnotice: () => undefined });
const dispatcher = createDispatcher({
  sql,
  schema: config.schema,
  instanceId: config.instanceId,
  concurrency: config.concurrency,
  batchSize: config.batchSize,
  maxBatchSize: config.batchSize, // fixed batches: the redelivery bound of the suite
  pollIntervalMs: 50,
  logger: consoleLogger,
  consumers: [
    {
      name: 'keyed',
      lanes: config.lanes,
      handler: async (event: EventRecord, ctx) => {
        const line: LaneDelivery = {
          id: event.id.toString(),
          s: event.streamId,
          l: ctx.instanceId,
          p: tag,
          t: now(),
        };
        writeSync(fd, `${JSON.stringify(line)}\n`);
        if (config.handlerMs > 0) await sleep(config.handlerMs);
      },
    },
  ],
});

process.on('SIGTERM', () => {
  void (async () => {
    await dispatcher.stop();
    await sql.end({ timeout: 5 });
    closeSync(fd);
    console.log('LANES STOPPED');
    process.exit(0);
  })();
});

await dispatcher.start();
console.log(`LANES READY ${process.pid}`);

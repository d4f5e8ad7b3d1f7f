// A dispatcher process for the rebuild scenario (rebuild.reliability.test.ts), started with
// `node --conditions=@sluice/source --import tsx rebuild-child.ts` and CHILD_CONFIG set. It declares
// versions 1 and 2 of a transactional projection `stats`: each writes one row per event into
// `<schema>.proj_v<version>` (primary key: the event id) through ctx.tx, so a row is there exactly
// when the version's cursor passed its event. SIGTERM stops the dispatcher cleanly (exit 0).
import { consoleLogger, createDispatcher, type Consumer } from '@sluice/core';
import postgres from 'postgres';
import { childConfig, sleep } from '../rig/child.js';

export interface RebuildChildConfig {
  readonly url: string;
  readonly schema: string;
  readonly instanceId: string;
  readonly batchSize: number;
  /** Each handler call of version 2 awaits this long: the rebuild takes a while. */
  readonly rebuildHandlerMs: number;
  readonly parentPid: number;
}

const config = childConfig() as RebuildChildConfig;
const sql = postgres(config.url, { max: 6, onnotice: () => undefined });

const projection = (version: number): Consumer => ({
  name: 'stats',
  version,
  transactional: true,
  batchSize: config.batchSize,
  maxBatchSize: config.batchSize,
  handler: async (event, ctx) => {
    if (!ctx.tx) throw new Error('a transactional handler has ctx.tx');
    if (version === 2 && config.rebuildHandlerMs > 0) await sleep(config.rebuildHandlerMs);
    await ctx.tx`insert into ${ctx.tx(`${config.schema}.proj_v${version}`)} (id) values (${event.id.toString()}::bigint)`;
  },
});

const dispatcher = createDispatcher({
  sql,
  schema: config.schema,
  instanceId: config.instanceId,
  concurrency: 4,
  pollIntervalMs: 50,
  logger: consoleLogger,
  consumers: [projection(1), projection(2)],
});

process.on('SIGTERM', () => {
  void (async () => {
    await dispatcher.stop();
    await sql.end({ timeout: 5 });
    console.log('REBUILD STOPPED');
    process.exit(0);
  })();
});

await dispatcher.start();
console.log(`REBUILD READY ${process.pid}`);

// A dispatcher process for the backend-kill storm (storm.reliability.test.ts), started with
// `node --conditions=@sluice/source --import tsx storm-child.ts` and CHILD_CONFIG set. It runs
// the stock postgres.js release users install: no patch, default pool options. Every delivery is
// written to `file` as a JSON line (fs.writeSync: nothing is lost if the process dies). SIGTERM
// stops the dispatcher and exits 0, printing how long stop() took.
import { closeSync, openSync, writeSync } from 'node:fs';
import {
  consoleLogger,
  createDispatcher,
  type Consumer,
  type EventRecord,
  type Sql,
  type TransactionSql,
} from '@sluice/core';
import postgres from 'postgres';
import { childConfig } from '../rig/child.js';
import type { StormChildConfig, StormDelivery } from './storm-shared.js';

const config = childConfig() as StormChildConfig;

const fd = openSync(config.file, 'a');
const record = (consumer: string, event: EventRecord) => {
  const line: StormDelivery = { c: consumer, id: event.id.toString() };
  writeSync(fd, `${JSON.stringify(line)}\n`);
};

// Whatever kills the process is what the storm must never do: report it before dying.
process.on('uncaughtException', (error) => {
  console.log(`FATAL uncaughtException ${error.stack ?? String(error)}`);
  process.exit(90);
});
process.on('unhandledRejection', (error) => {
  console.log(
    `FATAL unhandledRejection ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`,
  );
  process.exit(91);
});

// The application's own pool, as a user creates it: the stock driver with its defaults.
const sql = postgres(config.url, {
  onnotice: () => undefined,
  connection: { application_name: 'storm-app' },
}) as unknown as Sql;
await sql`create table if not exists ${sql(`${config.schema}.projection_rows`)} (event_id bigint primary key)`;

const consumers: Consumer[] = [
  {
    name: 'plain-a',
    handler: (event) => {
      record('plain-a', event);
    },
  },
  {
    name: 'plain-b',
    handler: (event) => {
      record('plain-b', event);
    },
  },
  {
    name: 'batched',
    handler: (event) => {
      record('batched', event);
    },
    batchHandler: (events) => {
      for (const event of events) record('batched', event);
    },
  },
  {
    name: 'projection',
    transactional: true,
    handler: async (event, ctx) => {
      await (ctx.tx as TransactionSql)`
        insert into ${sql(`${config.schema}.projection_rows`)} values (${event.id.toString()}::bigint)
        on conflict do nothing`;
      record('projection', event);
    },
  },
  {
    name: 'feed',
    delivery: 'per-instance',
    handler: (event) => {
      record('feed', event);
    },
  },
];

const dispatcher = createDispatcher({
  sql,
  schema: config.schema,
  instanceId: config.instanceId,
  consumers,
  pollIntervalMs: 50,
  logger: consoleLogger,
});
await dispatcher.start();
console.log(`READY ${process.pid}`);

process.once('SIGTERM', () => {
  void (async () => {
    const started = performance.now();
    await dispatcher.stop();
    console.log(`STOPPED ${Math.round(performance.now() - started)}`);
    await sql.end({ timeout: 2 });
    closeSync(fd);
    process.exit(0);
  })();
});

// A dispatcher process for the crash scenarios (C7, C8), started by crash.reliability.test.ts with
// `node --conditions=@sluice/source --import tsx crash-child.ts` and CHILD_CONFIG set. Every
// handler call first writes a side-effect record (fs.writeSync: it survives a SIGKILL) to `file`;
// then, on the marked event, C7 SIGKILLs the process and C8 calls process.exit(1). SIGTERM stops
// the dispatcher cleanly (exit 0).
import { closeSync, openSync, writeSync } from 'node:fs';
import {
  consoleLogger,
  createDispatcher,
  type Consumer,
  type EventRecord,
  type HandlerContext,
} from '@sluice/core';
import postgres from 'postgres';
import { childConfig } from '../rig/child.js';

export interface CrashChildConfig {
  readonly url: string;
  readonly schema: string;
  /** Side-effect records, one JSON line per handler call. */
  readonly file: string;
  readonly generation: number;
  /** C7: after the side effect of this event, SIGKILL this process. */
  readonly killOnId?: string;
  /** C8: after the side effect of this event, process.exit(1) (every time it is delivered). */
  readonly exitOnId?: string;
  readonly batchSize: number;
  readonly maxAttempts: number;
  /** `side-effects` registers with startFrom 'now' (T3: a straggler kills the process). */
  readonly startFromNow?: boolean;
  readonly parentPid: number;
}

/** One side-effect record. */
export interface EffectLine {
  /** Consumer. */
  readonly c: string;
  readonly id: string;
  /** Process generation. */
  readonly g: number;
  /** ctx.attempt. */
  readonly a: number;
}

const config = childConfig() as CrashChildConfig; // and never outlive the test process

const fd = openSync(config.file, 'a');
const effect = (consumer: string, event: EventRecord, ctx: HandlerContext) => {
  const line: EffectLine = { c: consumer, id: event.id.toString(), g: config.generation, a: ctx.attempt };
  writeSync(fd, `${JSON.stringify(line)}\n`);
};

const consumers: Consumer[] = [
  {
    name: 'side-effects',
    errorPolicy: { maxAttempts: config.maxAttempts },
    ...(config.startFromNow ? { startFrom: 'now' as const } : {}),
    handler: (event, ctx) => {
      effect('side-effects', event, ctx);
      if (event.id.toString() === config.killOnId) process.kill(process.pid, 'SIGKILL');
      if (event.id.toString() === config.exitOnId) process.exit(1);
    },
  },
  {
    name: 'bystander',
    handler: (event, ctx) => {
      effect('bystander', event, ctx);
    },
  },
];

const sql = postgres(config.url, {
  max: 8,
  onnotice: () => undefined,
  connection: { application_name: `crash-child-${config.generation}` },
});
const dispatcher = createDispatcher({
  sql,
  schema: config.schema,
  consumers,
  batchSize: config.batchSize,
  pollIntervalMs: 50,
  listen: false,
  retryDelayMs: 0,
  rearmCooldownMs: 3_600_000,
  logger: consoleLogger,
});
await dispatcher.start();
console.log(`READY ${process.pid}`);

process.once('SIGTERM', () => {
  void (async () => {
    await dispatcher.stop();
    await sql.end({ timeout: 2 });
    closeSync(fd);
    process.exit(0);
  })();
});

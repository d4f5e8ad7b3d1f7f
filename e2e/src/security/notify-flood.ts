// X6's attacker, a child process (its own event loop, its own connection) started by
// races.reliability.test.ts through startChild() (scenarios/support.ts), so with CHILD_CONFIG set:
// an unprivileged role floods pg_notify on the Sluice channel with hostile payloads, `batch`
// notifications per autocommit statement (one commit each). Prints one line,
// `FLOOD {"sent","commits","failed","startMs","endMs"}` (epoch milliseconds), and exits.
import { setTimeout as sleep } from 'node:timers/promises';
import postgres from 'postgres';
import { childConfig } from '../rig/child.js';

export interface FloodConfig {
  /** Connection URL of the unprivileged role. */
  readonly url: string;
  readonly channel: string;
  /** The schema under attack (named in the SQL-text payloads). */
  readonly schema: string;
  readonly durationMs: number;
  /** Notifications per second to aim for. */
  readonly perSecond: number;
  /** Notifications per statement (per commit). */
  readonly batch: number;
  readonly parentPid: number;
}

export interface FloodReport {
  /** Notifications of committed statements. */
  readonly sent: number;
  /** Committed statements (each carries `batch` notifications). */
  readonly commits: number;
  /** Statements that failed (their notifications were never sent). */
  readonly failed: number;
  readonly startMs: number;
  readonly endMs: number;
}

const config = childConfig() as FloodConfig; // and never outlive the test process

/** One hostile payload per batch (±2^63, a JSON bomb, 7,999 bytes, SQL text, …). */
function hostile(seq: number): string {
  switch (seq % 6) {
    case 0:
      return '9223372036854775807';
    case 1:
      return '-9223372036854775808';
    case 2:
      return `{"id": 9007199254740993, "consumer": "x'; drop table ${config.schema}.events;--", "seq": ${seq}}`;
    case 3:
      return `${'['.repeat(3990)}${seq}${']'.repeat(3990)}`.slice(0, 7999);
    case 4:
      return `${seq}:`.padEnd(7999, 'A');
    default:
      return `'; update ${config.schema}.consumers set cursor = 9223372036854775807; -- ${seq}`;
  }
}

/** A batch: distinct payloads (PostgreSQL folds identical notifications of one transaction). */
function payloads(seq: number): string[] {
  return [
    hostile(seq),
    ...Array.from({ length: config.batch - 1 }, (_, i) => String(1_000_000_000 + seq * config.batch + i)),
  ];
}

const forger = postgres(config.url, { max: 1, onnotice: () => undefined });
await forger`select 1`;

const MAX_IN_FLIGHT = 32;
let issued = 0;
let sent = 0;
let commits = 0;
let failed = 0;
const inFlight = new Set<Promise<void>>();
const startMs = Date.now();
while (Date.now() - startMs < config.durationMs) {
  const due = ((Date.now() - startMs) / 1000) * config.perSecond;
  if (issued * config.batch >= due) {
    await sleep(1);
    continue;
  }
  if (inFlight.size >= MAX_IN_FLIGHT) {
    await Promise.race(inFlight);
    continue;
  }
  // Pipelined on the one connection. (::text first: a string bound as json would be encoded
  // again, as a JSON string scalar.)
  const batch = JSON.stringify(payloads(issued++));
  const statement: Promise<void> = forger`
    select count(pg_notify(${config.channel}, p)) from json_array_elements_text(${batch}::text::json) p`.then(
    () => {
      sent += config.batch;
      commits++;
    },
    () => {
      failed++;
    },
  );
  inFlight.add(statement);
  void statement.finally(() => inFlight.delete(statement));
}
await Promise.all(inFlight);
const endMs = Date.now();
const report: FloodReport = { sent, commits, failed, startMs, endMs };
process.stdout.write(`FLOOD ${JSON.stringify(report)}\n`);
await forger.end({ timeout: 5 });

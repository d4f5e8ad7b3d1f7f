// `pnpm demo:load [--url http://127.0.0.1:3000] [--rate 20] [--duration 30] [--orders <n>] [--bounce 0.02] [--seed <n>]`
// Realistic traffic for the demo shop (see traffic.ts), with live progress and a final summary.
import { parseArgs } from 'node:util';
import { percentile, startTraffic } from './traffic.js';

const { values } = parseArgs({
  options: {
    url: { type: 'string', default: process.env['DEMO_URL'] ?? 'http://127.0.0.1:3000' },
    rate: { type: 'string', default: '20' },
    duration: { type: 'string', default: '30' },
    orders: { type: 'string' },
    bounce: { type: 'string', default: '0.02' },
    seed: { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  },
});

if (values.help) {
  console.log(`Usage: pnpm demo:load [--url <base>] [--rate <orders/s>] [--duration <s>] [--orders <n>]
                      [--bounce <fraction>] [--seed <n>]

Places orders at --rate per second for --duration seconds (or until --orders orders were placed);
~70% are paid and ~15% cancelled. A --bounce fraction of the orders come from customers whose
address does not exist: the demo's mail provider refuses every mail to them (a hard bounce), and
the mailer copies each such mail to its dead letters at once and goes on. --seed replays
the same order mix.`);
  process.exit(0);
}

const number = (name: string, value: string, min: number, max: number, integer = false) => {
  const n = Number(value);
  if (!Number.isFinite(n) || n < min || n > max || (integer && !Number.isInteger(n))) {
    console.error(`--${name} must be ${integer ? 'an integer' : 'a number'} between ${min} and ${max}`);
    process.exit(2);
  }
  return n;
};
const base = values.url.replace(/\/$/, '');
const rate = number('rate', values.rate, 0.1, 2000);
const durationS = number('duration', values.duration, 1, 86_400);
const orders = values.orders === undefined ? undefined : number('orders', values.orders, 1, 1e9, true);
const bounceShare = number('bounce', values.bounce, 0, 1);
const seed = values.seed === undefined ? undefined : number('seed', values.seed, 0, 2 ** 31 - 1, true);

const startedAt = Date.now();
const traffic = startTraffic({
  base,
  rate,
  durationMs: durationS * 1000,
  ...(orders === undefined ? {} : { orders }),
  bounceShare,
  ...(seed === undefined ? {} : { seed }),
});
const { counts, latencies } = traffic;
const progress = setInterval(() => {
  const elapsed = (Date.now() - startedAt) / 1000;
  process.stdout.write(
    `\r${elapsed.toFixed(0).padStart(4)} s  placed ${counts.placed}  paid ${counts.paid}  cancelled ${counts.cancelled}` +
      `  bouncing ${counts.bouncing}  errors ${counts.errors}  p99 ${percentile(latencies, 99).toFixed(1)} ms   `,
  );
}, 500);

console.log(
  `Load: ${rate} orders/s for ${durationS} s${orders === undefined ? '' : ` (at most ${orders} orders)`} ` +
    `against ${base} (bounce share ${bounceShare}, seed ${traffic.seed})`,
);
await traffic.done;
clearInterval(progress);
const elapsedS = (Date.now() - startedAt) / 1000;

const stats = await fetch(`${base}/stats`).then(
  (r) => r.json() as Promise<Record<string, number>>,
  () => undefined,
);
console.log(`

Summary
  orders placed       ${counts.placed}  (${(counts.placed / elapsedS).toFixed(1)}/s)
  paid / cancelled    ${counts.paid} / ${counts.cancelled}
  bouncing customers  ${counts.bouncing}  (${counts.mailsToBouncing} mails to them: each goes to the mailer's dead letters)
  errors              ${counts.errors}${traffic.lastError ? `  (last: ${traffic.lastError.slice(0, 120)})` : ''}
  latency             p50 ${percentile(latencies, 50).toFixed(1)} ms  p99 ${percentile(latencies, 99).toFixed(1)} ms  max ${Math.max(0, ...latencies).toFixed(1)} ms
  /stats now          ${stats ? JSON.stringify(stats) : 'unavailable'}
  seed                ${traffic.seed}  (--seed ${traffic.seed} places the same orders again)`);

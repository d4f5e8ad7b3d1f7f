// `pnpm demo:load [--url http://127.0.0.1:3000] [--rate 20] [--duration 30] [--bounce 0.02]`
// Realistic traffic for the demo shop: orders from a pool of customers (a few of whom bounce),
// most paid, some cancelled, with live progress and a final summary.
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    url: { type: 'string', default: process.env['DEMO_URL'] ?? 'http://127.0.0.1:3000' },
    rate: { type: 'string', default: '20' },
    duration: { type: 'string', default: '30' },
    bounce: { type: 'string', default: '0.02' },
    help: { type: 'boolean', short: 'h', default: false },
  },
});

if (values.help) {
  console.log(`Usage: pnpm demo:load [--url <base>] [--rate <orders/s>] [--duration <s>] [--bounce <fraction>]

Places orders at --rate per second for --duration seconds; ~70% are paid and ~10% cancelled.
A --bounce fraction of customers have addresses the demo's mail transport refuses: each such
order poisons the mailer consumer (retries, then dead) until an operator skips it.`);
  process.exit(0);
}

const number = (name: string, value: string, min: number, max: number) => {
  const n = Number(value);
  if (!Number.isFinite(n) || n < min || n > max) {
    console.error(`--${name} must be a number between ${min} and ${max}`);
    process.exit(2);
  }
  return n;
};
const base = values.url.replace(/\/$/, '');
const rate = number('rate', values.rate, 0.1, 2000);
const durationS = number('duration', values.duration, 1, 86_400);
const bounceShare = number('bounce', values.bounce, 0, 1);

const SKUS = ['TEA-1', 'TEA-2', 'MUG-1', 'POT-3', 'CUP-7', 'KETTLE-2', 'SPOON-4'];
const pick = <T>(items: readonly T[]): T => items[Math.floor(Math.random() * items.length)] as T;
const latencies: number[] = [];
const counts = { placed: 0, paid: 0, cancelled: 0, bounced: 0, errors: 0 };
let lastError = '';

async function call(path: string, body: unknown): Promise<{ id?: string } | undefined> {
  const started = performance.now();
  try {
    const response = await fetch(`${base}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    latencies.push(performance.now() - started);
    if (!response.ok) {
      counts.errors += 1;
      lastError = `${response.status} ${await response.text()}`;
      return undefined;
    }
    return (await response.json()) as { id?: string };
  } catch (error) {
    counts.errors += 1;
    lastError = (error as Error).message;
    return undefined;
  }
}

async function oneOrder(n: number): Promise<void> {
  const bounces = Math.random() < bounceShare;
  const customer = bounces ? `bounce-${n}@example.com` : `customer-${n % 500}@example.com`;
  const items = Array.from({ length: 1 + Math.floor(Math.random() * 3) }, () => ({
    sku: pick(SKUS),
    quantity: 1 + Math.floor(Math.random() * 4),
    priceCents: 100 * (1 + Math.floor(Math.random() * 40)),
  }));
  const placed = await call('/orders', { customer, items });
  if (!placed?.id) return;
  counts.placed += 1;
  if (bounces) counts.bounced += 1;
  const roll = Math.random();
  if (roll < 0.7) {
    if (await call(`/orders/${placed.id}/pay`, {})) counts.paid += 1;
    if (roll < 0.05 && (await call(`/orders/${placed.id}/cancel`, { reason: 'changed my mind' })))
      counts.cancelled += 1;
  } else if (roll < 0.8) {
    if (await call(`/orders/${placed.id}/cancel`, { reason: 'changed my mind' })) counts.cancelled += 1;
  }
}

function percentile(values: number[], p: number): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;
}

const startedAt = Date.now();
const pending = new Set<Promise<void>>();
let n = 0;
const progress = setInterval(() => {
  const elapsed = (Date.now() - startedAt) / 1000;
  process.stdout.write(
    `\r${elapsed.toFixed(0).padStart(4)} s  placed ${counts.placed}  paid ${counts.paid}  cancelled ${counts.cancelled}` +
      `  bouncing ${counts.bounced}  errors ${counts.errors}  p99 ${percentile(latencies, 99).toFixed(1)} ms   `,
  );
}, 500);

console.log(`Load: ${rate} orders/s for ${durationS} s against ${base} (bounce share ${bounceShare})`);
while (Date.now() - startedAt < durationS * 1000) {
  const due = startedAt + (n / rate) * 1000;
  const wait = due - Date.now();
  if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
  const order = oneOrder(n++).finally(() => pending.delete(order));
  pending.add(order);
}
await Promise.all(pending);
clearInterval(progress);

const stats = await fetch(`${base}/stats`).then(
  (r) => r.json() as Promise<Record<string, number>>,
  () => undefined,
);
console.log(`

Summary
  orders placed       ${counts.placed}  (${(counts.placed / durationS).toFixed(1)}/s)
  paid / cancelled    ${counts.paid} / ${counts.cancelled}
  bouncing customers  ${counts.bounced}  (each poisons the mailer until skipped)
  errors              ${counts.errors}${lastError ? `  (last: ${lastError.slice(0, 120)})` : ''}
  latency             p50 ${percentile(latencies, 50).toFixed(1)} ms  p99 ${percentile(latencies, 99).toFixed(1)} ms  max ${Math.max(0, ...latencies).toFixed(1)} ms
  /stats now          ${stats ? JSON.stringify(stats) : 'unavailable'}`);

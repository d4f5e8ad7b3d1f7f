// The traffic of `pnpm demo:load`: orders from a pool of customers (a few of whom have addresses
// that do not exist), most paid, some cancelled, placed at a steady rate over HTTP. The tour's
// test drives the same function with a fixed seed.

export interface TrafficOptions {
  /** The demo's base URL, without a trailing slash. */
  readonly base: string;
  /** Orders started per second. */
  readonly rate: number;
  /** No order is started after this long. @defaultValue no limit (then `orders` must be set) */
  readonly durationMs?: number;
  /** No more orders than this. @defaultValue no limit (then `durationMs` must be set) */
  readonly orders?: number;
  /** Share (0–1) of orders placed by a customer whose address does not exist (`bounce-<n>@example.com`). */
  readonly bounceShare: number;
  /** Seed of the order mix: customers, items, payments and cancellations. @defaultValue a random seed */
  readonly seed?: number;
}

export interface TrafficCounts {
  placed: number;
  paid: number;
  cancelled: number;
  /** Orders placed by a customer whose address does not exist (one customer each). */
  bouncing: number;
  /** Events appended for those orders: each one is a mail the mail provider refuses. */
  mailsToBouncing: number;
  errors: number;
}

export interface Traffic {
  /** Updated as requests complete. */
  readonly counts: TrafficCounts;
  /** Milliseconds per request. */
  readonly latencies: number[];
  /** Ids of the orders placed by customers whose address does not exist. */
  readonly bouncingOrderIds: string[];
  readonly seed: number;
  /** The last failed request, if any. */
  lastError: string;
  /** Settles when every order started has finished. */
  readonly done: Promise<void>;
}

const SKUS = ['TEA-1', 'TEA-2', 'MUG-1', 'POT-3', 'CUP-7', 'KETTLE-2', 'SPOON-4'];
const CUSTOMER_POOL = 500;

/** mulberry32: a small, fast generator of numbers in [0, 1), the same sequence for the same seed. */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

/** Starts the traffic; `done` settles once the last order has finished. */
export function startTraffic(options: TrafficOptions): Traffic {
  if (options.durationMs === undefined && options.orders === undefined) {
    throw new Error('startTraffic needs durationMs or orders');
  }
  const seed = options.seed ?? Math.floor(Math.random() * 2 ** 31);
  const random = seededRandom(seed);
  const counts: TrafficCounts = {
    placed: 0,
    paid: 0,
    cancelled: 0,
    bouncing: 0,
    mailsToBouncing: 0,
    errors: 0,
  };
  const traffic: Omit<Traffic, 'done'> & { lastError: string } = {
    counts,
    latencies: [],
    bouncingOrderIds: [],
    seed,
    lastError: '',
  };

  async function call(path: string, body: unknown): Promise<{ id?: string } | undefined> {
    const started = performance.now();
    try {
      const response = await fetch(`${options.base}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      traffic.latencies.push(performance.now() - started);
      if (!response.ok) {
        counts.errors += 1;
        traffic.lastError = `${response.status} ${await response.text()}`;
        return undefined;
      }
      return (await response.json()) as { id?: string };
    } catch (error) {
      counts.errors += 1;
      traffic.lastError = (error as Error).message;
      return undefined;
    }
  }

  async function oneOrder(n: number): Promise<void> {
    // Every draw for this order happens here, before the first request: with a seed, the order
    // mix does not depend on how the requests of concurrent orders interleave.
    const bounces = random() < options.bounceShare;
    const customer = bounces ? `bounce-${n}@example.com` : `customer-${n % CUSTOMER_POOL}@example.com`;
    const items = Array.from({ length: 1 + Math.floor(random() * 3) }, () => ({
      sku: SKUS[Math.floor(random() * SKUS.length)] as string,
      quantity: 1 + Math.floor(random() * 4),
      priceCents: 100 * (1 + Math.floor(random() * 40)),
    }));
    const roll = random();
    const pays = roll < 0.7;
    const cancels = roll < 0.05 || (roll >= 0.7 && roll < 0.8);

    const placed = await call('/orders', { customer, items });
    if (!placed?.id) return;
    const mails = (appended: boolean) => {
      if (appended && bounces) counts.mailsToBouncing += 1;
      return appended;
    };
    counts.placed += 1;
    mails(true);
    if (bounces) {
      counts.bouncing += 1;
      traffic.bouncingOrderIds.push(placed.id);
    }
    if (pays && mails((await call(`/orders/${placed.id}/pay`, {})) !== undefined)) counts.paid += 1;
    if (
      cancels &&
      mails((await call(`/orders/${placed.id}/cancel`, { reason: 'changed my mind' })) !== undefined)
    ) {
      counts.cancelled += 1;
    }
  }

  async function run(): Promise<void> {
    const startedAt = Date.now();
    const pending = new Set<Promise<void>>();
    for (let n = 0; ; n++) {
      if (options.orders !== undefined && n >= options.orders) break;
      const dueMs = (n / options.rate) * 1000;
      if (options.durationMs !== undefined && dueMs >= options.durationMs) break;
      const wait = startedAt + dueMs - Date.now();
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      const order = oneOrder(n).finally(() => pending.delete(order));
      pending.add(order);
    }
    await Promise.all(pending);
  }

  return Object.assign(traffic, { done: run() });
}

export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;
}

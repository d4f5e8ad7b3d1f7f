// Version 2 of order-stats rebuilt beside version 1 while orders come in (docs/design.md §12):
// /stats serves version 1 until an operator approves the takeover, version 2 after it, and no
// request in between sees a version half built.
import { until } from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import { expect, onTestFinished, test } from 'vitest';
import { buildApp, OPS_PREFIX } from './app.js';

const db = await useTestDatabase();
const PASSWORD = 'demo-test-password';
const ops = { authorization: `Basic ${Buffer.from(`ops:${PASSWORD}`).toString('base64')}` };
const order = (customer: string) => ({ customer, items: [{ sku: 'TEA-1', quantity: 2, priceCents: 450 }] });

async function demo(orderStatsV2: boolean) {
  const built = await buildApp({
    sql: db.sql,
    instanceId: 'test-instance',
    bounce: /^bounce/,
    greylistShare: 0,
    opsPassword: PASSWORD,
    pollIntervalMs: 20,
    orderStatsV2,
  });
  await built.app.ready();
  return built;
}

test('/stats serves version 1 while version 2 rebuilds, and version 2 once its takeover is approved', async () => {
  // A shop that ran version 1 alone for a while.
  const first = await demo(false);
  const placeAndPay = async (app: typeof first.app, n: number) => {
    for (let i = 0; i < n; i++) {
      const placed = await app.inject({
        method: 'POST',
        url: '/orders',
        payload: order(`c${i}@example.com`),
      });
      const { id } = placed.json<{ id: string }>();
      await app.inject({ method: 'POST', url: `/orders/${id}/pay` });
    }
  };
  await placeAndPay(first.app, 10);
  await until(
    async () =>
      (await first.app.inject({ method: 'GET', url: '/stats' })).json<Record<string, number>>()['paid'] ===
      10,
    15_000,
    'version 1 caught up',
  );
  await first.app.close();

  // The next deployment declares version 2: it is rebuilt from the beginning beside version 1.
  const { app } = await demo(true);
  onTestFinished(() => app.close());
  const stats = async () => {
    const response = await app.inject({ method: 'GET', url: '/stats' });
    return {
      version: String(response.headers['x-order-stats-version']),
      body: response.json<Record<string, number>>(),
    };
  };
  expect((await stats()).version).toBe('1');
  const rebuilds = async () =>
    (await app.inject({ method: 'GET', url: `${OPS_PREFIX}/rebuilds`, headers: ops })).json<
      { consumer: string; rebuild: { version: number; lagEvents: string; state: string } | null }[]
    >();
  await until(async () => (await rebuilds())[0]?.rebuild?.lagEvents === '0', 15_000, 'version 2 caught up');
  expect((await rebuilds())[0]?.rebuild).toMatchObject({ version: 2, state: 'rebuilding' });

  // Orders keep coming while an operator approves; requests watch /stats throughout.
  const seen: { version: string; placed: number }[] = [];
  const watching = { on: true };
  const watcher = (async () => {
    while (watching.on) {
      const s = await stats();
      seen.push({ version: s.version, placed: s.body['placed'] ?? -1 });
    }
  })();
  const more = placeAndPay(app, 5);
  const approved = await app.inject({
    method: 'POST',
    url: `${OPS_PREFIX}/consumers/order-stats/rebuild/approve`,
    headers: { ...ops, 'content-type': 'application/json' },
    payload: { reason: 'net revenue' },
  });
  expect(approved.statusCode, approved.body).toBe(200);
  await more;
  await until(async () => (await stats()).version === '2', 15_000, 'version 2 serves /stats');
  await until(
    async () => {
      const { body } = await stats();
      return body['placed'] === 15 && body['paid'] === 15;
    },
    15_000,
    'version 2 counted every order and payment',
  );
  watching.on = false;
  await watcher;

  const final = await stats();
  expect(final.body).toMatchObject({
    placed: 15,
    paid: 15,
    revenue_cents: 15 * 900,
    net_revenue_cents: 15 * 900,
  });
  // No request saw the count go back: version 2 went live holding at least what version 1 showed.
  for (let i = 1; i < seen.length; i++) {
    expect(
      seen[i]?.placed ?? 0,
      JSON.stringify(seen.slice(Math.max(0, i - 2), i + 1)),
    ).toBeGreaterThanOrEqual(seen[i - 1]?.placed ?? 0);
  }
  expect(new Set(seen.map((s) => s.version))).toEqual(new Set(['1', '2']));
});

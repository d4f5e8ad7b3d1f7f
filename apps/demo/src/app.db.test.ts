import { useTestDatabase } from '@sluice/testing/vitest';
import type { AddressInfo } from 'node:net';
import { expect, onTestFinished, test } from 'vitest';
import { buildApp, OPS_PREFIX } from './app.js';

const db = await useTestDatabase();
const PASSWORD = 'demo-test-password';
const ops = { authorization: `Basic ${Buffer.from(`ops:${PASSWORD}`).toString('base64')}` };

async function demo() {
  const built = await buildApp({
    sql: db.sql,
    instanceId: 'test-instance',
    bounce: /^bounce/,
    opsPassword: PASSWORD,
    pollIntervalMs: 20,
  });
  onTestFinished(() => built.app.close());
  await built.app.ready();
  return built;
}

async function until(condition: () => boolean | Promise<boolean>, what: string, timeoutMs = 15_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

const order = (customer: string) => ({ customer, items: [{ sku: 'TEA-1', quantity: 2, priceCents: 450 }] });

test('an order flow changes /stats through the transactional projection; search and mail follow', async () => {
  const { app, mails } = await demo();
  const before = (await app.inject({ method: 'GET', url: '/stats' })).json<Record<string, number>>();
  const placed = await app.inject({ method: 'POST', url: '/orders', payload: order('ada@example.com') });
  expect(placed.statusCode).toBe(201);
  const { id } = placed.json<{ id: string }>();
  expect((await app.inject({ method: 'POST', url: `/orders/${id}/pay` })).statusCode).toBe(200);
  expect((await app.inject({ method: 'POST', url: `/orders/${id}/pay` })).statusCode).toBe(409);
  await until(
    async () =>
      (await app.inject({ method: 'GET', url: '/stats' })).json<Record<string, number>>()['paid'] ===
      (before['paid'] ?? 0) + 1,
    'stats',
  );
  const stats = (await app.inject({ method: 'GET', url: '/stats' })).json<Record<string, number>>();
  expect(stats['placed']).toBe((before['placed'] ?? 0) + 1);
  expect(stats['revenue_cents']).toBe((before['revenue_cents'] ?? 0) + 900);
  await until(() => mails.sent.some((m) => m.subject === `Payment for order ${id} confirmed`), 'mail');
  await until(
    async () =>
      (await app.inject({ method: 'GET', url: '/search?q=ada' })).json<{ results: unknown[] }>().results
        .length > 0,
    'search',
  );
});

test('invalid orders are rejected with 400 and write nothing', async () => {
  const { app } = await demo();
  for (const payload of [
    { customer: 'not-an-email', items: order('a@b.c').items },
    { customer: 'a@b.c', items: [] },
    { customer: 'a@b.c' },
  ]) {
    expect((await app.inject({ method: 'POST', url: '/orders', payload })).statusCode).toBe(400);
  }
  expect((await app.inject({ method: 'POST', url: '/orders/not-an-id/pay' })).statusCode).toBe(400);
  expect(
    (await app.inject({ method: 'POST', url: '/orders/00000000-0000-0000-0000-000000000000/pay' }))
      .statusCode,
  ).toBe(404);
});

test('a bouncing customer kills the mailer; skipping the event through the ops routes brings it back', async () => {
  const { app, mails } = await demo();
  const bad = (
    await app.inject({ method: 'POST', url: '/orders', payload: order('bounce@example.com') })
  ).json<{ eventId: string }>();
  await app.inject({ method: 'POST', url: '/orders', payload: order('grace@example.com') });
  const mailer = async () =>
    (await app.inject({ method: 'GET', url: `${OPS_PREFIX}/consumers/mailer`, headers: ops })).json<{
      status: string;
      lagEvents: string;
      stuckEventId: string | null;
    }>();
  await until(async () => (await mailer()).status === 'dead', 'the mailer to die');
  expect((await mailer()).stuckEventId).toBe(bad.eventId);
  const skip = await app.inject({
    method: 'POST',
    url: `${OPS_PREFIX}/consumers/mailer/skip`,
    headers: ops,
    payload: { eventId: bad.eventId },
  });
  expect(skip.statusCode).toBe(200);
  await until(async () => (await mailer()).lagEvents === '0', 'the mailer to catch up');
  expect(mails.sent.some((m) => m.to === 'grace@example.com')).toBe(true);
});

test('/feed streams events over Server-Sent Events and /metrics shows Sluice metrics', async () => {
  const { app } = await demo();
  await app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.server.address() as AddressInfo;
  const controller = new AbortController();
  onTestFinished(() => {
    controller.abort();
  });
  const response = await fetch(`http://127.0.0.1:${port}/feed`, { signal: controller.signal });
  expect(response.headers.get('content-type')).toContain('text/event-stream');
  const reader = (response.body as ReadableStream<Uint8Array>).getReader();
  let received = '';
  await app.inject({ method: 'POST', url: '/orders', payload: order('feed@example.com') });
  await until(async () => {
    const chunk = await reader.read();
    if (chunk.value !== undefined) received += Buffer.from(chunk.value).toString('utf8');
    return received.includes('event: OrderPlaced');
  }, 'an SSE event');
  expect(received).toContain('feed@example.com');
  let metrics = '';
  await until(async () => {
    metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    return /sluice_events_processed_total\{sluice_consumer_name="order-stats"/.test(metrics);
  }, 'the order-stats metrics');
  expect(metrics).toContain('sluice_consumer_lag');
});

import { until } from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import { spawnSync } from 'node:child_process';
import type { AddressInfo } from 'node:net';
import { expect, onTestFinished, test } from 'vitest';
import { buildApp, OPS_PREFIX, type DemoOptions } from './app.js';
import { checkOpenMetrics } from './openmetrics-check.js';

// promtool from Debian's prometheus package, on PATH. CI cannot skip these tests unnoticed: it
// installs the package, and .ci/demo-smoke.sh and the end-to-end tests fail without it.
const PROMTOOL = 'promtool';
const hasPromtool = spawnSync(PROMTOOL, ['--version']).status === 0;
/** The Accept header of Prometheus 2's scrapes. */
const PROMETHEUS_ACCEPT =
  'application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1';

const db = await useTestDatabase();
const PASSWORD = 'demo-test-password';
const ops = { authorization: `Basic ${Buffer.from(`ops:${PASSWORD}`).toString('base64')}` };

async function demo(options: Partial<DemoOptions> = {}) {
  const built = await buildApp({
    sql: db.sql,
    instanceId: 'test-instance',
    bounce: /^bounce/,
    greylistShare: 0,
    opsPassword: PASSWORD,
    pollIntervalMs: 20,
    ...options,
  });
  onTestFinished(() => built.app.close());
  await built.app.ready();
  return built;
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
    15_000,
    'stats',
  );
  const stats = (await app.inject({ method: 'GET', url: '/stats' })).json<Record<string, number>>();
  expect(stats['placed']).toBe((before['placed'] ?? 0) + 1);
  expect(stats['revenue_cents']).toBe((before['revenue_cents'] ?? 0) + 900);
  await until(
    () => mails.sent.some((m) => m.subject === `Payment for order ${id} confirmed`),
    15_000,
    'mail',
  );
  await until(
    async () =>
      (await app.inject({ method: 'GET', url: '/search?q=ada' })).json<{ results: unknown[] }>().results
        .length > 0,
    15_000,
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

interface ConsumerView {
  status: string;
  cursor: string;
  lagEvents: string;
  attempts: number;
  stuckEventId: string | null;
}

interface DeadLetterView {
  eventId: string;
  reason: string;
  error: string | null;
  attempts: number;
}

test("the mail provider's refusals: a greylisted address gets through on the retry, a bouncing one goes to the dead letters", async () => {
  const lines: string[] = [];
  const { app, mails } = await demo({ greylistShare: 1, logLine: (line) => lines.push(line) });
  const placed: Record<string, string> = {};
  for (const customer of ['grace@example.com', 'bounce@example.com', 'ada@example.com']) {
    placed[customer] = (await app.inject({ method: 'POST', url: '/orders', payload: order(customer) })).json<{
      eventId: string;
    }>().eventId;
  }
  const mailer = async () =>
    (
      await app.inject({ method: 'GET', url: `${OPS_PREFIX}/consumers/mailer`, headers: ops })
    ).json<ConsumerView>();
  await until(async () => (await mailer()).lagEvents === '0', 15_000, 'the mailer to reach the head');

  expect((await mailer()).status).toBe('idle');
  expect(mails.sent.map((m) => m.to).sort()).toEqual(['ada@example.com', 'grace@example.com']);
  // Greylisted once each (451), then sent; the hard bounce is refused once: the mailer's error
  // policy calls it permanent, so it is not retried.
  expect(mails.refused.map((m) => `${m.to} ${m.reply.slice(0, 3)}`)).toEqual([
    'grace@example.com 451',
    'bounce@example.com 550',
    'ada@example.com 451',
  ]);
  const letters = (
    await app.inject({ method: 'GET', url: `${OPS_PREFIX}/consumers/mailer/dead-letters`, headers: ops })
  ).json<DeadLetterView[]>();
  expect(letters).toEqual([
    expect.objectContaining({
      eventId: placed['bounce@example.com'],
      reason: 'apply-error',
      attempts: 3,
      error: '550 5.1.1 <bounce@example.com>: mailbox does not exist (hard bounce)',
    }),
  ]);
  // Nobody had to act, and the console stayed quiet: no consumer died.
  expect((await app.inject({ method: 'GET', url: `${OPS_PREFIX}/audit`, headers: ops })).json()).toEqual([]);
  expect(lines).toEqual([]);
});

test('a malformed event kills order-stats only, with one log line; skipping it through the ops routes brings it back', async () => {
  const lines: string[] = [];
  const { app } = await demo({ logLine: (line) => lines.push(line) });
  const poison = (await app.inject({ method: 'POST', url: '/demo/poison' })).json<{
    eventId: string;
    streamId: string;
  }>();
  await app.inject({ method: 'POST', url: '/orders', payload: order('grace@example.com') });
  const consumer = async (name: string) =>
    (
      await app.inject({ method: 'GET', url: `${OPS_PREFIX}/consumers/${name}`, headers: ops })
    ).json<ConsumerView>();
  await until(async () => (await consumer('order-stats')).status === 'dead', 15_000, 'order-stats to die');
  expect(await consumer('order-stats')).toMatchObject({ stuckEventId: poison.eventId, attempts: 3 });
  await until(
    async () => (await consumer('mailer')).lagEvents === '0',
    15_000,
    'the mailer to go past the poison',
  );
  expect((await consumer('mailer')).status).toBe('idle');
  expect(lines).toEqual([
    `[sluice] consumer order-stats is DEAD: event ${poison.eventId} failed 3 attempts ` +
      `(OrderPaid event ${poison.eventId} (${poison.streamId}): ` +
      'amountCents is "4,50", not a whole number of cents); the other consumers go on. Diagnose it on the dashboard.',
  ]);

  const skip = await app.inject({
    method: 'POST',
    url: `${OPS_PREFIX}/consumers/order-stats/skip`,
    headers: ops,
    payload: { eventId: poison.eventId },
  });
  expect(skip.statusCode).toBe(200);
  await until(
    async () => (await consumer('order-stats')).lagEvents === '0',
    15_000,
    'order-stats to catch up',
  );
  expect((await consumer('order-stats')).status).toBe('idle');
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
  const readUntil = (text: string) =>
    until(
      async () => {
        const chunk = await reader.read();
        if (chunk.value !== undefined) received += Buffer.from(chunk.value).toString('utf8');
        return received.includes(text);
      },
      15_000,
      `the feed to send ${JSON.stringify(text)}`,
    );
  await app.inject({ method: 'POST', url: '/orders', payload: order('feed@example.com') });
  await readUntil('event: OrderPlaced');
  expect(received).toContain('feed@example.com');
  // A line break in a type stays inside its event line: it cannot start a field of its own.
  await app.sluice.transaction((tx) =>
    app.sluice.append(tx, [{ streamId: 'x', type: 'Odd\nevent: Forged', data: {} }]),
  );
  await readUntil('event: Odd event: Forged\n');
  expect(received).not.toMatch(/^event: Forged/m);
  let metrics = '';
  await until(
    async () => {
      metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      return /^sluice_events_processed_total\{[^}]*sluice_consumer_name="order-stats"/m.test(metrics);
    },
    15_000,
    'the order-stats metrics',
  );
  expect(metrics).toContain('sluice_consumer_lag');
});

test('app.close() with a /feed reader connected ends the stream and closes (Ctrl+C while the tour has one open)', async () => {
  const { app } = await demo();
  await app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.server.address() as AddressInfo;
  const response = await fetch(`http://127.0.0.1:${port}/feed`);
  const reader = (response.body as ReadableStream<Uint8Array>).getReader();
  await reader.read(); // connected
  let closed = false;
  const closing = app.close().then(() => {
    closed = true;
  });
  // The server ends the stream itself: the reader sees its end, and the close completes.
  for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read());
  await until(() => closed, 10_000, 'app.close() to complete');
  await closing;
});

test('an order is cancelled without a body (the reason is optional), once', async () => {
  const { app } = await demo();
  const placed = await app.inject({ method: 'POST', url: '/orders', payload: order('cancel@example.com') });
  const { id } = placed.json<{ id: string }>();
  const cancelled = await app.inject({ method: 'POST', url: `/orders/${id}/cancel` });
  expect(cancelled.statusCode, cancelled.body).toBe(200);
  expect(cancelled.json()).toEqual({ id, status: 'cancelled' });
  const again = await app.inject({
    method: 'POST',
    url: `/orders/${id}/cancel`,
    payload: { reason: 'twice' },
  });
  expect(again.statusCode, again.body).toBe(409);
});

/** /metrics as a scraper sending `accept` gets it, once the handler histogram has values. */
async function scrape(
  accept: string,
): Promise<{ contentType: string | null; vary: string | null; body: string }> {
  const { app } = await demo();
  await app.inject({ method: 'POST', url: '/orders', payload: order('metrics@example.com') });
  const get = () => app.inject({ method: 'GET', url: '/metrics', headers: { accept } });
  await until(
    async () => (await get()).body.includes('sluice_handler_duration_seconds_bucket'),
    15_000,
    'handler durations in /metrics',
  );
  const response = await get();
  expect(response.statusCode).toBe(200);
  return {
    contentType: response.headers['content-type'] as string | null,
    vary: response.headers['vary'] as string | null,
    body: response.body,
  };
}

test('/metrics answers Prometheus in valid OpenMetrics, with the demo service name and seconds-sized buckets', async () => {
  const { contentType, vary, body } = await scrape(PROMETHEUS_ACCEPT);
  expect(contentType).toBe('application/openmetrics-text; version=1.0.0; charset=utf-8');
  expect(vary).toBe('accept');
  expect(checkOpenMetrics(body)).toEqual([]);
  expect(body).toMatch(/^target_info\{[^}]*service_name="sluice-demo"[^}]*\} 1$/m);
  expect(body).toContain('# UNIT sluice_handler_duration_seconds seconds\n');
  expect(body).toMatch(/^sluice_handler_duration_seconds_bucket\{[^}]*le="0.001"\} \d+$/m);
  expect(body).toMatch(/^sluice_handler_duration_seconds_bucket\{[^}]*le="30.0"\} \d+$/m);
  expect(body).not.toMatch(/le="10000"/);
});

test.skipIf(!hasPromtool)(
  '/metrics answers curl in the Prometheus text format, which promtool check metrics accepts',
  async () => {
    const { contentType, body } = await scrape('*/*');
    expect(contentType).toBe('text/plain; version=0.0.4; charset=utf-8');
    expect(body).not.toContain('# EOF');
    const lint = spawnSync(PROMTOOL, ['check', 'metrics'], { input: body, encoding: 'utf8' });
    expect({ status: lint.status, output: lint.stdout + lint.stderr }).toEqual({ status: 0, output: '' });
  },
);

// The ops dashboard in a real Chromium (Debian's, driven by playwright-core). On the demo shop
// (Basic auth, payloads redacted by the demo's ops.redact): an operator finds order-stats dead on a
// poison event, opens the event it is stuck on, disables a consumer, skips the event, watches
// order-stats recover and opens its dead letter and one of the mailer's (a hard bounce, the address
// redacted); the charts fill from the polls; the page fits 1280 px and 390 px without sideways
// scrolling, and the screenshots in docs/images are taken here. On a plugin app with a bearer
// token: the page loads without credentials and asks for the token. On a plugin app with a consumer
// run as lanes that parks keys: each lane is a row named "lane k of N"; a key is parked, the
// operator opens Parked keys, reads the key's events (redacted), replays it once the failure is
// fixed and the key is gone; a change of the lane count shows as a note until it is through. On a
// plugin app with a versioned consumer: version 2 rebuilds beside version 1 and its card in the
// Rebuilds panel shows its progress (docs/images/dashboard-rebuild.png is taken here); an approval
// while it is far behind is refused and force is offered only then; once caught up it is paused,
// resumed and approved from the card, and version 2 is live.
import { fileURLToPath } from 'node:url';
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { buildApp, OPS_PREFIX } from '@sluice/demo/app';
import sluice, { basicAuth, bearerAuth } from '@sluice/fastify';
import { migrate, silentLogger, type EventRecord } from '@sluice/core';
import { appendEvents, failingOn, holdGap, recordingConsumer } from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import Fastify from 'fastify';
import { chromium, type Browser, type Locator, type Page } from 'playwright-core';
import { afterAll, beforeAll, expect, onTestFinished, test } from 'vitest';

const CHROMIUM = process.env['CHROMIUM_PATH'] ?? '/usr/bin/chromium';
/** Checked in: the README and docs/operating.md show them. */
const IMAGES = new URL('../../docs/images/', import.meta.url);
const PASSWORD = 'e2e-ops-password';
const hasChromium = existsSync(CHROMIUM);
// CI installs Chromium and sets SLUICE_REQUIRE_BROWSER: there a missing browser fails the run.
if (!hasChromium && process.env['SLUICE_REQUIRE_BROWSER']) {
  throw new Error(`no Chromium at ${CHROMIUM}: install Debian's chromium package (or set CHROMIUM_PATH)`);
}

const db = await useTestDatabase();
let browser: Browser | undefined;

beforeAll(async () => {
  if (!hasChromium) return;
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--force-color-profile=srgb',
    ],
  });
});
afterAll(async () => {
  await browser?.close();
});

/** Collects the page's uncaught errors and failed console messages: a test ends with none. */
function watchErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on('pageerror', (error) => errors.push(error.message));
  page.on('console', (message) => {
    // The 401s of the sign-in flow are expected answers; anything else logged as an error is not.
    if (message.type() === 'error' && !message.text().includes('status of 401')) {
      errors.push(`${message.text()} (${message.location().url})`);
    }
  });
  return errors;
}

/**
 * Sideways overflow of the page itself (scrollWidth beyond clientWidth of the scrolling element),
 * and of the consumers' table inside its own box. Browser-side code is given as text: this
 * package is type-checked without the DOM library.
 */
async function overflow(page: Page): Promise<{ page: number; table: number }> {
  return page.evaluate(`(() => {
    const root = document.scrollingElement ?? document.documentElement;
    const wrap = document.querySelector('#consumers')?.closest('.table-wrap');
    return {
      page: root.scrollWidth - root.clientWidth,
      table: wrap ? wrap.scrollWidth - wrap.clientWidth : 0,
    };
  })()`);
}

/** Takes focus and the pointer off the page (no focus ring or hover in a screenshot), scrolls to the top. */
async function settle(page: Page): Promise<void> {
  await page.mouse.move(0, 0);
  await page.evaluate('document.activeElement?.blur?.(); window.scrollTo(0, 0)');
}

/** The `data-action` of the focused element. */
function focusedAction(page: Page): Promise<string | null> {
  return page.evaluate("document.activeElement?.getAttribute('data-action') ?? null");
}

/** The visible write actions of a consumer row, in order. */
async function offered(row: Locator): Promise<string[]> {
  const buttons = await row.locator('.actions button.write:visible').all();
  return Promise.all(buttons.map(async (button) => (await button.getAttribute('data-action')) ?? ''));
}

const status = (row: Locator) => row.locator('[data-status]').getAttribute('data-status');

/** An attribute of every element a locator matches, in order. */
async function attributes(locator: Locator, name: string): Promise<(string | null)[]> {
  return Promise.all((await locator.all()).map((element) => element.getAttribute(name)));
}

test.skipIf(!hasChromium)(
  'an operator opens the stuck event, skips it, reads the dead letters, and the page fits 1280 and 390 px',
  async () => {
    const { app } = await buildApp({
      sql: db.sql,
      instanceId: 'e2e',
      bounce: /^bounce/,
      opsPassword: PASSWORD,
      pollIntervalMs: 50,
      logLine: () => undefined, // order-stats' death is expected here
    });
    onTestFinished(() => app.close());
    await app.listen({ port: 0, host: '127.0.0.1' });
    const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;

    const order = async (customer: string) => {
      const response = await fetch(`${base}/orders`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ customer, items: [{ sku: 'TEA-1', quantity: 1, priceCents: 450 }] }),
      });
      expect(response.status).toBe(201);
      return (await response.json()) as { id: string; eventId: string };
    };
    await order('ada@example.com');
    const poisoned = await fetch(`${base}/demo/poison`, { method: 'POST' });
    expect(poisoned.status).toBe(201);
    const poison = (await poisoned.json()) as { eventId: string; data: { orderId: string } };
    await order('grace@example.com');

    const context = await browser!.newContext({
      httpCredentials: { username: 'ops', password: PASSWORD },
      viewport: { width: 1280, height: 800 },
    });
    onTestFinished(() => context.close());
    const page = await context.newPage();
    const pageErrors = watchErrors(page);
    await page.goto(`${base}${OPS_PREFIX}/`);

    const mailer = page.locator('tr[data-consumer="mailer"]');
    const searchIndex = page.locator('tr[data-consumer="search-index"]');
    const orderStats = page.locator('tr[data-consumer="order-stats"]');
    await expect.poll(() => status(orderStats), { timeout: 30_000 }).toBe('dead');

    // Actions only where they apply: a dead consumer can be skipped and re-armed (the enable
    // request, labelled Re-arm), a healthy one neither; Disable only when not disabled; Replay and
    // Fence need dead letters and gaps, which nobody has yet.
    expect(await offered(orderStats)).toEqual(['skip', 'enable', 'disable', 'restart']);
    expect(await orderStats.locator('[data-action="enable"]').textContent()).toBe('Re-arm');
    await expect.poll(() => offered(mailer), { timeout: 10_000 }).toEqual(['disable', 'restart']);
    expect(await orderStats.locator('[data-error-state]').getAttribute('data-error-state')).toBe('current');

    // The event it is stuck on, opened from its status: payload and metadata.
    await orderStats.locator('[data-action="view-event"]').click();
    const payload = page.locator('#payload-dialog[open]');
    await expect.poll(() => payload.locator('[data-payload="data"]').count()).toBe(1);
    expect(await payload.locator('#payload-title').textContent()).toBe(
      `Event ${poison.eventId} of order-stats`,
    );
    const eventData = JSON.parse((await payload.locator('[data-payload="data"]').textContent()) ?? '') as {
      orderId: string;
      amountCents: unknown;
    };
    expect(eventData).toMatchObject({ orderId: poison.data.orderId, amountCents: '4,50' });
    expect(await payload.textContent()).toContain('it is stuck on this event');
    JSON.parse((await payload.locator('[data-payload="metadata"]').textContent()) ?? '');
    await page.keyboard.press('Escape');
    await expect.poll(() => payload.count()).toBe(0);
    // Focus is back on the button that opened it.
    expect(await focusedAction(page)).toBe('view-event');

    // Disable the search index until enabled again: now Enable is offered there, Disable is not.
    await searchIndex.locator('[data-action="disable"]').click();
    const dialog = page.locator('#action-dialog[open]');
    await dialog.getByLabel('Until enabled again').check();
    await dialog.locator('#dialog-reason').fill('reindex after the catalogue import');
    await dialog.locator('[data-confirm]').click();
    await expect.poll(() => status(searchIndex), { timeout: 10_000 }).toBe('disabled');
    expect(await offered(searchIndex)).toEqual(['enable', 'restart']);
    expect(await searchIndex.locator('[data-action="enable"]').textContent()).toBe('Enable');

    // Skip: the dialog is pre-filled with the event order-stats is stuck on.
    await orderStats.locator('[data-action="skip"]').click();
    await expect.poll(() => dialog.count()).toBe(1);
    expect(await dialog.locator('input').first().inputValue()).toBe(poison.eventId);
    await dialog.locator('[data-confirm]').click();
    await expect
      .poll(() => page.locator('#result').textContent(), { timeout: 10_000 })
      .toMatch(/Skipped event/);
    await expect.poll(() => status(orderStats), { timeout: 30_000 }).toBe('idle');
    await expect
      .poll(() => orderStats.locator('[data-lag-events]').getAttribute('data-lag-events'), {
        timeout: 30_000,
      })
      .toBe('0');

    // Recovered: its last error is shown as past, with when it was resolved; the dead letter
    // counts, so Replay is offered; nothing to skip or enable any more.
    await expect
      .poll(() => orderStats.locator('[data-error-state]').getAttribute('data-error-state'), {
        timeout: 10_000,
      })
      .toBe('resolved');
    expect(await orderStats.locator('.tag-resolved').textContent()).toBe('Resolved');
    expect(await orderStats.locator('.error-meta').textContent()).toMatch(
      /^failed \d+ s ago · resolved: skip by ops \d+ s ago$/,
    );
    expect(await orderStats.locator('.error-preview').textContent()).toContain(
      `OrderPaid event ${poison.eventId}`,
    );
    await expect.poll(() => offered(orderStats)).toEqual(['disable', 'replay', 'restart']);

    // Its dead letter, opened from order-stats' dead letters.
    await orderStats.locator('[data-action="dead-letters"]').click();
    const detail = page.locator('#detail[data-detail="dead-letters"]');
    await expect.poll(() => detail.locator('tr[data-dead-letter]').count(), { timeout: 10_000 }).toBe(1);
    await detail.locator('[data-action="view-dead-letter"]').click();
    await expect.poll(() => payload.locator('[data-payload="data"]').count()).toBe(1);
    expect(await payload.locator('#payload-title').textContent()).toMatch(/^Dead letter \d+ of order-stats$/);
    expect(await payload.textContent()).toContain('skipped by an operator');
    expect(await payload.textContent()).toContain('not a whole number of cents');
    await payload.locator('#payload-close').click();
    await expect.poll(() => payload.count()).toBe(0);

    // A hard bounce goes to the mailer's dead letters by policy (the mailer goes on): its payload is
    // shown with the customer's address redacted.
    await order('bounce@example.com');
    await expect.poll(() => offered(mailer), { timeout: 30_000 }).toEqual(['disable', 'replay', 'restart']);
    await mailer.locator('[data-action="dead-letters"]').click();
    await expect.poll(() => detail.locator('tr[data-dead-letter]').count(), { timeout: 10_000 }).toBe(1);
    await detail.locator('[data-action="view-dead-letter"]').click();
    await expect.poll(() => payload.locator('[data-payload="data"]').count()).toBe(1);
    expect(await payload.locator('#payload-title').textContent()).toMatch(/^Dead letter \d+ of mailer$/);
    const letterData = JSON.parse((await payload.locator('[data-payload="data"]').textContent()) ?? '') as {
      customer: string;
    };
    expect(letterData.customer).toBe('b…@example.com');
    // (The provider's error message names the address: errors are not payloads, ops.redact
    // applies to data and metadata.)
    expect(await payload.locator('[data-payload="data"]').textContent()).not.toContain('bounce@example.com');
    await payload.locator('#payload-close').click();
    await expect.poll(() => payload.count()).toBe(0);

    // Traffic while the page polls, two orders per poll: the disabled search index falls behind;
    // enabled again, it catches up. The charts get lag and throughput points from the polls.
    const trend = orderStats.locator('.trend');
    const polls = async () => Number(await trend.getAttribute('data-lag-points'));
    const traffic = async (rounds: number, label: string) => {
      for (let i = 0; i < rounds; i++) {
        const before = await polls();
        await order(`${label}-${i}@example.com`);
        await order(`${label}-${i}-again@example.com`);
        await expect.poll(polls, { timeout: 10_000 }).toBeGreaterThan(before);
      }
    };
    await traffic(5, 'early');
    await expect
      .poll(async () =>
        Number(await searchIndex.locator('[data-lag-events]').getAttribute('data-lag-events')),
      )
      .toBeGreaterThanOrEqual(10);
    await searchIndex.locator('[data-action="enable"]').click();
    await dialog.locator('[data-confirm]').click();
    await expect.poll(() => status(searchIndex), { timeout: 10_000 }).not.toBe('disabled');
    expect(await offered(searchIndex)).toEqual(['disable', 'restart']);
    await traffic(4, 'late');
    await expect
      .poll(() => searchIndex.locator('[data-lag-events]').getAttribute('data-lag-events'), {
        timeout: 30_000,
      })
      .toBe('0');
    expect(Number(await trend.getAttribute('data-rate-points'))).toBeGreaterThanOrEqual(8);

    // The larger charts of one consumer: its lag rose while it was disabled and fell when it
    // caught up, which the throughput bars show.
    await searchIndex.locator('[data-action="trends"]').click();
    const trends = page.locator('#detail[data-detail="trends"]');
    await expect.poll(() => trends.locator('[data-chart]').count()).toBe(2);
    const lagChart = trends.locator('[data-chart="lag"]');
    const rateChart = trends.locator('[data-chart="rate"]');
    expect(Number(await lagChart.getAttribute('data-points'))).toBeGreaterThanOrEqual(10);
    expect(await lagChart.locator('polyline').count()).toBeGreaterThanOrEqual(1);
    expect(await lagChart.locator('svg').getAttribute('aria-label')).toMatch(
      /^Lag over the last \d+ minutes? \(\d+ samples\): now 0 events, highest (\d+) events$/,
    );
    const highest = /highest (\d+) events/.exec(
      (await lagChart.locator('svg').getAttribute('aria-label')) ?? '',
    );
    expect(Number(highest?.[1])).toBeGreaterThanOrEqual(10);
    await expect
      .poll(() => rateChart.locator('rect.chart-bar:not(.chart-bar-zero)').count())
      .toBeGreaterThan(0);

    // 1280 px: nothing scrolls sideways, not even the table inside its box.
    await settle(page);
    expect(await overflow(page)).toEqual({ page: 0, table: 0 });
    await mkdir(IMAGES, { recursive: true });
    await page.screenshot({ path: fileURLToPath(new URL('dashboard-1280.png', IMAGES)), fullPage: true });

    // 390 px, a phone: consumers become cards, still no sideways scrolling.
    await page.setViewportSize({ width: 390, height: 844 });
    await expect.poll(() => overflow(page)).toEqual({ page: 0, table: 0 });
    const cardWidth = (await orderStats.boundingBox())?.width ?? Infinity;
    expect(cardWidth).toBeLessThanOrEqual(390);
    await page.locator('#detail-close').click();
    await settle(page);
    await page.screenshot({ path: fileURLToPath(new URL('dashboard-390.png', IMAGES)), fullPage: true });
    // A dialog fits the phone too.
    await orderStats.locator('[data-action="dead-letters"]').click();
    await expect.poll(() => detail.locator('tr[data-dead-letter]').count(), { timeout: 10_000 }).toBe(1);
    await detail.locator('[data-action="view-dead-letter"]').click();
    await expect.poll(() => payload.locator('[data-payload="data"]').count()).toBe(1);
    const box = await payload.boundingBox();
    expect((box?.x ?? 0) + (box?.width ?? Infinity)).toBeLessThanOrEqual(390);
    expect(await overflow(page)).toEqual({ page: 0, table: 0 });
    expect(pageErrors).toEqual([]);

    const audit = (await (
      await fetch(`${base}${OPS_PREFIX}/audit`, {
        headers: { authorization: `Basic ${Buffer.from(`ops:${PASSWORD}`).toString('base64')}` },
      })
    ).json()) as { action: string; actor: string; consumer: string }[];
    expect(audit.map((a) => [a.action, a.consumer, a.actor])).toEqual([
      ['enable', 'search-index', 'ops'],
      ['skip', 'order-stats', 'ops'],
      ['disable', 'search-index', 'ops'],
    ]);
  },
);

test.skipIf(!hasChromium)(
  'with a bearer token the page loads without credentials, asks for the token and keeps it for the tab only',
  async () => {
    const TOKEN = 'e2e-bearer-token-0123456789';
    const schema = 'bearer_e2e';
    await migrate(db.sql, { schema, logger: silentLogger });
    const app = Fastify({ logger: false });
    await app.register(sluice, {
      sql: db.sql,
      schema,
      consumers: [
        recordingConsumer('projection').consumer,
        failingOn('reactor', (e) => e.id === 2n, { errorPolicy: { maxAttempts: 1 } }).consumer,
      ],
      listen: false,
      pollIntervalMs: 50,
      logger: silentLogger,
      ops: { auth: bearerAuth(TOKEN, 'token-operator') },
    });
    onTestFinished(() => app.close());
    await app.listen({ port: 0, host: '127.0.0.1' });
    const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
    await appendEvents(db.sql, 3, undefined, schema);

    // The API itself still wants the token.
    expect((await fetch(`${base}/sluice/consumers`)).status).toBe(401);

    const context = await browser!.newContext({ viewport: { width: 1280, height: 800 } });
    onTestFinished(() => context.close());
    const page = await context.newPage();
    const pageErrors = watchErrors(page);
    const apiAuthorization: (string | undefined)[] = [];
    page.on('request', (request) => {
      if (new URL(request.url()).pathname === '/sluice/consumers') {
        apiAuthorization.push(request.headers()['authorization']);
      }
    });
    const response = await page.goto(`${base}/sluice/`);
    expect(response?.status()).toBe(200);

    // It asks for the token and shows no data.
    const signIn = page.locator('#sign-in');
    await expect.poll(() => signIn.isVisible()).toBe(true);
    expect(await page.locator('#main').isVisible()).toBe(false);
    expect(await page.locator('tr[data-consumer]').count()).toBe(0);
    expect(await page.evaluate('document.activeElement?.id')).toBe('token-input');

    // A wrong token is refused and forgotten.
    await page.locator('#token-input').fill('not-the-token-0000000000');
    await page.locator('#token-save').click();
    await expect.poll(() => page.locator('#token-status').textContent()).toMatch(/refused this token/);
    expect(await page.evaluate('sessionStorage.length')).toBe(0);

    // The right one shows the consumers; it is in sessionStorage, never in localStorage.
    await page.locator('#token-input').fill(TOKEN);
    await page.keyboard.press('Enter');
    const reactor = page.locator('tr[data-consumer="reactor"]');
    await expect.poll(() => status(reactor), { timeout: 30_000 }).toBe('dead');
    expect(await signIn.isVisible()).toBe(false);
    expect(await page.locator('tr[data-consumer="projection"]').count()).toBe(1);
    expect(await page.evaluate("[sessionStorage.getItem('sluice.ops.token'), localStorage.length]")).toEqual([
      TOKEN,
      0,
    ]);
    expect(apiAuthorization.at(-1)).toBe(`Bearer ${TOKEN}`);

    // Its actions go out with the token too (and as JSON, same origin).
    await reactor.locator('[data-action="view-event"]').click();
    await expect.poll(() => page.locator('#payload-dialog[open] [data-payload="data"]').count()).toBe(1);
    await page.keyboard.press('Escape');

    // A reload keeps it for the tab: no new sign-in. Sign out forgets it and shows nothing.
    await page.reload();
    await expect.poll(() => status(reactor), { timeout: 30_000 }).toBe('dead');
    expect(await signIn.isVisible()).toBe(false);
    await page.locator('#sign-out').click();
    await expect.poll(() => signIn.isVisible(), { timeout: 10_000 }).toBe(true);
    expect(await page.locator('tr[data-consumer]').count()).toBe(0);
    expect(await page.evaluate('sessionStorage.length')).toBe(0);
    expect(pageErrors).toEqual([]);
  },
);

test.skipIf(!hasChromium)(
  'a laned consumer parks a key: the operator reads its events, replays it once fixed, and it is gone',
  async () => {
    const schema = 'lanes_e2e';
    await migrate(db.sql, { schema, logger: silentLogger });
    const broken = new Set(['order-1']);
    const delivered: EventRecord[] = [];
    const app = Fastify({ logger: false });
    await app.register(sluice, {
      sql: db.sql,
      schema,
      consumers: [
        {
          name: 'reactor',
          lanes: 3,
          errorPolicy: { maxAttempts: 1, parkKey: true },
          handler: (event) => {
            if (broken.has(event.streamId)) throw new Error(`cannot handle ${event.streamId}`);
            delivered.push(event);
          },
        },
        recordingConsumer('projection').consumer,
      ],
      listen: false,
      pollIntervalMs: 50,
      logger: silentLogger,
      ops: {
        auth: basicAuth({ username: 'ops', password: PASSWORD }),
        redact: ({ data, metadata }) => ({ data: { ...data, email: '[redacted]' }, metadata }),
      },
    });
    onTestFinished(() => app.close());
    await app.listen({ port: 0, host: '127.0.0.1' });
    const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
    const basic = { authorization: `Basic ${Buffer.from(`ops:${PASSWORD}`).toString('base64')}` };
    // Four keys; order-1 (events 2, 6 and 10) fails and is parked, the others go on.
    await appendEvents(
      db.sql,
      12,
      (n) => ({ streamId: `order-${n % 4}`, type: 'OrderPlaced', data: { n, email: `c${n}@example.com` } }),
      schema,
    );

    const context = await browser!.newContext({
      httpCredentials: { username: 'ops', password: PASSWORD },
      viewport: { width: 1280, height: 800 },
    });
    onTestFinished(() => context.close());
    const page = await context.newPage();
    const pageErrors = watchErrors(page);
    await page.goto(`${base}/sluice/`);

    // One row per lane, named as the lane it is; the consumer's parked key on each of them.
    const lanes = page.locator('tr[data-consumer="reactor"]');
    await expect.poll(() => lanes.count(), { timeout: 30_000 }).toBe(3);
    // Opened with the credentials in its URL, the page loads its data too: fetch() refuses a URL
    // that carries credentials, as a relative one resolved against such a page does.
    const inUrl = await browser!.newContext({ viewport: { width: 1280, height: 800 } });
    onTestFinished(() => inUrl.close());
    const withCredentials = await inUrl.newPage();
    await withCredentials.goto(`${base.replace('http://', `http://ops:${PASSWORD}@`)}/sluice/`);
    await expect
      .poll(() => withCredentials.locator('tr[data-consumer="reactor"]').count(), { timeout: 30_000 })
      .toBe(3);
    expect(await lanes.locator('[data-lane]').allTextContents()).toEqual([
      'lane 0 of 3',
      'lane 1 of 3',
      'lane 2 of 3',
    ]);
    expect(await lanes.first().locator('[data-lane]').getAttribute('title')).toBe('instance *0/3');
    await expect
      .poll(() => page.locator('tr[data-consumer="reactor"][data-parked-keys="1"]').count(), {
        timeout: 30_000,
      })
      .toBe(3);
    expect(await lanes.first().locator('.status-notes').textContent()).toContain('1 parked key');
    expect(await page.locator('[data-tile="parked-keys"] .tile-value').textContent()).toBe('1');
    const projection = page.locator('tr[data-consumer="projection"]');
    expect(await projection.locator('[data-action="parked-keys"]').isVisible()).toBe(false);
    // The lanes go on with the other keys: every lane at the head, none dead.
    await expect
      .poll(async () => (await attributes(lanes.locator('[data-status]'), 'data-status')).join())
      .toBe('idle,idle,idle');

    // The Parked keys panel, from the second lane's row: the key, its first event, error and count.
    await lanes.nth(1).locator('[data-action="parked-keys"]').click();
    const detail = page.locator('#detail[data-detail="parked-keys"]');
    expect(await page.locator('#detail-title').textContent()).toBe('Parked keys of reactor');
    const parkedRow = detail.locator('tr[data-parked-key="order-1"]');
    await expect.poll(() => parkedRow.count(), { timeout: 10_000 }).toBe(1);
    const cells = await parkedRow.locator('th, td').allTextContents();
    expect(cells.slice(0, 4)).toEqual(['order-1', '2', 'cannot handle order-1', '3']);
    // 1280 px with the panel open: nothing scrolls sideways.
    await settle(page);
    expect(await overflow(page)).toEqual({ page: 0, table: 0 });

    // Its events, in the order a replay delivers them, payloads through ops.redact.
    await parkedRow.locator('[data-action="view-parked-events"]').click();
    const payload = page.locator('#payload-dialog[open][data-payload-kind="parked-events"]');
    await expect.poll(() => payload.locator('[data-parked-event]').count(), { timeout: 10_000 }).toBe(3);
    expect(await payload.locator('#payload-title').textContent()).toBe(
      'Parked events of key "order-1" of reactor',
    );
    expect(await attributes(payload.locator('[data-parked-event]'), 'data-parked-event')).toEqual([
      '2',
      '6',
      '10',
    ]);
    const first = JSON.parse(
      (await payload.locator('[data-parked-event="2"] [data-payload="data"]').textContent()) ?? '',
    ) as { n: number; email: string };
    expect(first).toEqual({ n: 1, email: '[redacted]' });
    expect(await payload.locator('[data-parked-event="2"]').textContent()).toContain('cannot handle order-1');
    expect(await payload.textContent()).not.toContain('@example.com');
    await page.keyboard.press('Escape');
    await expect.poll(() => payload.count()).toBe(0);
    expect(await focusedAction(page)).toBe('view-parked-events');

    // Fixed: the operator replays the key; its events are delivered in order and the key is gone.
    broken.delete('order-1');
    await parkedRow.locator('[data-action="replay-key"]').click();
    const dialog = page.locator('#action-dialog[open]');
    expect(await dialog.locator('#dialog-title').textContent()).toBe(
      'Replay parked key "order-1" of reactor',
    );
    expect(await dialog.locator('#dialog-description').textContent()).toMatch(
      /^Its 3 parked events are delivered/,
    );
    await dialog.locator('#dialog-reason').fill('fixed the order template');
    await dialog.locator('[data-confirm]').click();
    await expect
      .poll(() => page.locator('#result').textContent(), { timeout: 10_000 })
      .toMatch(
        /Replay requested for key "order-1" of reactor \(3 parked events\): delivered on the next turn of lane [0-2] of 3\./,
      );
    await expect.poll(() => detail.locator('tr[data-parked-key]').count(), { timeout: 30_000 }).toBe(0);
    expect(await detail.locator('.detail-summary').textContent()).toBe('No parked key.');
    await expect
      .poll(() => page.locator('tr[data-consumer="reactor"][data-parked-keys="0"]').count(), {
        timeout: 10_000,
      })
      .toBe(3);
    expect(await lanes.locator('[data-action="parked-keys"]:visible').count()).toBe(0);
    expect(await page.locator('[data-tile="parked-keys"] .tile-value').textContent()).toBe('0');
    expect(delivered.filter((e) => e.streamId === 'order-1').map((e) => e.id)).toEqual([2n, 6n, 10n]);

    // A change of the lane count: a note on every lane row while the old lanes drain (they hold a
    // gap), then the new lanes, named "lane k of 4".
    const gap = await holdGap(db.sql, undefined, { schema });
    onTestFinished(() => gap.release({ commit: false }).catch(() => undefined));
    await appendEvents(
      db.sql,
      4,
      (n) => ({ streamId: `order-${n}`, type: 'OrderPlaced', data: { n } }),
      schema,
    );
    // Every lane past the new events with the held id pending below them: the barrier is above it.
    const laneRows = async () =>
      (
        (await (await fetch(`${base}/sluice/consumers`, { headers: basic })).json()) as {
          name: string;
          cursor: string;
          pendingGaps: number;
        }[]
      ).filter((c) => c.name === 'reactor');
    await expect
      .poll(async () => (await laneRows()).map((c) => `${c.cursor}:${c.pendingGaps}`).join(), {
        timeout: 30_000,
      })
      .toBe('17:1,17:1,17:1');
    const relane = await fetch(`${base}/sluice/consumers/reactor/lanes`, {
      method: 'POST',
      headers: { ...basic, 'content-type': 'application/json' },
      body: JSON.stringify({ lanes: 4, reason: 'more throughput' }),
    });
    expect(relane.status).toBe(200);
    const { barrier } = (await relane.json()) as { barrier: string };
    const note = lanes.first().locator('.status-notes');
    await expect
      .poll(() => note.textContent(), { timeout: 30_000 })
      .toContain(`re-laning 3 → 4, barrier ${barrier}, switched: old lanes draining`);
    expect(await page.locator('tr[data-consumer="reactor"][data-lane-change="3-4"]').count()).toBe(7);
    await settle(page);
    expect(await overflow(page)).toEqual({ page: 0, table: 0 });
    await gap.release({ commit: false });
    await expect.poll(() => lanes.count(), { timeout: 30_000 }).toBe(4);
    expect(await lanes.locator('[data-lane]').allTextContents()).toEqual([
      'lane 0 of 4',
      'lane 1 of 4',
      'lane 2 of 4',
      'lane 3 of 4',
    ]);
    await expect.poll(() => page.locator('tr[data-lane-change]').count(), { timeout: 10_000 }).toBe(0);

    // 390 px, the laned rows as cards and the panel: no sideways scrolling.
    await page.setViewportSize({ width: 390, height: 844 });
    await settle(page);
    await expect.poll(() => overflow(page)).toEqual({ page: 0, table: 0 });
    expect(pageErrors).toEqual([]);

    const audit = (await (
      await fetch(`${base}/sluice/audit?consumer=reactor`, { headers: basic })
    ).json()) as {
      action: string;
      actor: string;
    }[];
    // The operator's actions, besides what the dispatcher recorded of the change (lanes switched, retired).
    expect(audit.filter((a) => a.actor === 'ops').map((a) => a.action)).toEqual([
      'relane',
      'replay-parked-key',
    ]);
  },
);

test.skipIf(!hasChromium)(
  'a rebuild: the panel shows its progress, an approval far behind is refused with force offered, and Approve makes the new version live',
  async () => {
    const schema = 'rebuild_e2e';
    await migrate(db.sql, { schema, logger: silentLogger });
    // Version 2 of stats rebuilds up to event 200, then waits at the gate: its progress holds still.
    let openGate: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => {
      openGate = resolve;
    });
    const handled: Record<1 | 2, bigint[]> = { 1: [], 2: [] };
    const app = Fastify({ logger: false });
    await app.register(sluice, {
      sql: db.sql,
      schema,
      consumers: [
        { name: 'stats', version: 1, handler: (event) => void handled[1].push(event.id) },
        {
          name: 'stats',
          version: 2,
          batchSize: 10,
          maxBatchSize: 10,
          handlerTimeoutMs: 120_000,
          handler: async (event) => {
            if (event.id > 200n) await gate;
            handled[2].push(event.id);
          },
        },
        recordingConsumer('feed').consumer,
      ],
      listen: false,
      pollIntervalMs: 50,
      logger: silentLogger,
      ops: { auth: basicAuth({ username: 'ops', password: PASSWORD }) },
    });
    onTestFinished(async () => {
      openGate();
      await app.close();
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
    const basic = { authorization: `Basic ${Buffer.from(`ops:${PASSWORD}`).toString('base64')}` };
    const rebuilds = async () =>
      (await (await fetch(`${base}/sluice/rebuilds`, { headers: basic })).json()) as {
        consumer: string;
        versions: { version: number; state: string }[];
        rebuild: { version: number; state: string; position: string | null } | null;
      }[];
    await appendEvents(
      db.sql,
      1_300,
      (n) => ({ streamId: `s-${n % 7}`, type: 'Counted', data: { n } }),
      schema,
    );

    const context = await browser!.newContext({
      httpCredentials: { username: 'ops', password: PASSWORD },
      viewport: { width: 1280, height: 800 },
    });
    onTestFinished(() => context.close());
    const page = await context.newPage();
    const pageErrors = watchErrors(page);
    await page.goto(`${base}/sluice/`);

    // Version 2 on its way beside version 1: its card with the bar, position and head, rate and
    // time left, and the actions that apply while it rebuilds.
    const panel = page.locator('#rebuilds');
    const card = panel.locator('li[data-rebuild="stats"][data-version="2"]');
    await expect.poll(() => card.getAttribute('data-position'), { timeout: 30_000 }).toBe('200');
    expect(await panel.isVisible()).toBe(true);
    expect(await card.getAttribute('data-head')).toBe('1300');
    expect(await card.getAttribute('data-rebuild-state')).toBe('rebuilding');
    expect(await card.getAttribute('data-progress')).toBe('15'); // 200 of 1300
    expect(await card.locator('progress').getAttribute('value')).toBe('15');
    expect(await card.locator('.rebuild-percent').textContent()).toBe('15%');
    expect(await card.locator('.rebuild-title').textContent()).toBe('statsv1 live → v2');
    expect(await card.locator('.badge').textContent()).toBe('rebuilding');
    const figures = await card.locator('.rebuild-figures dd').allTextContents();
    expect(figures[0]).toBe('200of 1300');
    expect(figures[1]).toBe('1100 eventsapprove within 1000');
    expect(figures[2]).toMatch(/^[0-9.]+k? events\/ssince it started$/);
    expect(figures[3]).toMatch(/^\d+ (s|min \d+ s|h \d+ min)$/);
    expect(await card.locator('.rebuild-note').textContent()).toBe(
      'Approve once it is within 1000 events of the head (an approval before needs force).',
    );
    const offeredOnCard = async () =>
      attributes(card.locator('.actions button.write:visible'), 'data-action');
    expect(await offeredOnCard()).toEqual(['approve-rebuild', 'pause-rebuild', 'abandon-rebuild']);
    // Version 1 serves meanwhile: it is at the head.
    await expect
      .poll(() => page.locator('tr[data-consumer="stats"] [data-lag-events]').getAttribute('data-lag-events'))
      .toBe('0');
    await settle(page);
    expect(await overflow(page)).toEqual({ page: 0, table: 0 });
    await mkdir(IMAGES, { recursive: true });
    await card.screenshot({ path: fileURLToPath(new URL('dashboard-rebuild.png', IMAGES)) });
    // 390 px: the card fits.
    await page.setViewportSize({ width: 390, height: 844 });
    await expect.poll(() => overflow(page)).toEqual({ page: 0, table: 0 });
    const box = await card.boundingBox();
    expect((box?.x ?? 0) + (box?.width ?? Infinity)).toBeLessThanOrEqual(390);
    await page.setViewportSize({ width: 1280, height: 800 });

    // Approve while 1100 events behind: refused (the live version would stop for that long), nothing
    // changes, and force is offered as a second, explicit step; the operator thinks better of it.
    await card.locator('[data-action="approve-rebuild"]').click();
    const dialog = page.locator('#action-dialog[open]');
    expect(await dialog.locator('#dialog-title').textContent()).toBe(
      'Approve the takeover of version 2 of stats',
    );
    expect(await dialog.locator('[data-force]').count()).toBe(0);
    await dialog.locator('[data-confirm]').click();
    await expect
      .poll(() => dialog.locator('#dialog-error').textContent(), { timeout: 10_000 })
      .toMatch(/is 1100 events behind the log head .* \(409 SLUICE_REBUILD_NOT_READY\)$/);
    expect(await dialog.locator('[data-force]').isVisible()).toBe(true);
    expect(await page.evaluate("document.activeElement?.getAttribute('data-force')")).toBe('');
    await dialog.locator('[data-force]').check();
    expect(await dialog.locator('[data-confirm]').textContent()).toBe('Approve with force');
    await dialog.locator('[data-force]').uncheck();
    expect(await dialog.locator('[data-confirm]').textContent()).toBe('Approve');
    await dialog.locator('#dialog-cancel').click();
    await expect.poll(() => dialog.count()).toBe(0);
    expect((await rebuilds())[0]?.versions.map((v) => v.state)).toEqual(['live', 'rebuilding']);

    // The rebuild goes on and catches up: at the head, ready to approve.
    openGate();
    await expect.poll(() => card.getAttribute('data-progress'), { timeout: 30_000 }).toBe('100');
    expect(await card.getAttribute('data-position')).toBe('1300');
    expect(await card.locator('.rebuild-figures dd').nth(3).textContent()).toBe('caught up');
    expect(await card.locator('.rebuild-note').textContent()).toBe(
      'Within 1000 events of the head: ready to approve.',
    );

    // Pause and resume from the card.
    await card.locator('[data-action="pause-rebuild"]').click();
    await dialog.locator('[data-confirm]').click();
    await expect.poll(() => card.getAttribute('data-rebuild-state'), { timeout: 10_000 }).toBe('paused');
    expect(await page.locator('#result').textContent()).toContain(
      'Paused the rebuild of version 2 of stats: its rows wait until it is resumed.',
    );
    expect(await offeredOnCard()).toEqual(['resume-rebuild', 'abandon-rebuild']);
    await card.locator('[data-action="resume-rebuild"]').click();
    await dialog.locator('[data-confirm]').click();
    await expect.poll(() => card.getAttribute('data-rebuild-state'), { timeout: 10_000 }).toBe('rebuilding');

    // Approve: version 1 stops at the head, version 2 is live; the card gives way to a line.
    await card.locator('[data-action="approve-rebuild"]').click();
    await dialog.locator('#dialog-reason').fill('v2 caught up');
    await dialog.locator('[data-confirm]').click();
    await expect
      .poll(() => page.locator('#result').textContent(), { timeout: 10_000 })
      .toMatch(/Approved: version 2 of stats is (live|taking over)/);
    await expect.poll(() => card.count(), { timeout: 30_000 }).toBe(0);
    const note = panel.locator('[data-versions="stats"]');
    await expect.poll(() => note.textContent(), { timeout: 10_000 }).toBe('stats v2 live, v1 retired');
    const [status] = await rebuilds();
    expect([status?.versions.map((v) => [v.version, v.state]), status?.rebuild]).toEqual([
      [
        [1, 'retired'],
        [2, 'live'],
      ],
      null,
    ]);
    expect(handled[2]).toEqual(Array.from({ length: 1_300 }, (_, i) => BigInt(i + 1)));
    expect(handled[1]).toHaveLength(1_300);
    await settle(page);
    expect(await overflow(page)).toEqual({ page: 0, table: 0 });

    // The refused approval is the page's only failed request.
    expect(pageErrors.filter((e) => !e.includes('status of 409'))).toEqual([]);
    expect(pageErrors.filter((e) => e.includes('status of 409'))).toHaveLength(1);
    const audit = (await (await fetch(`${base}/sluice/audit?consumer=stats`, { headers: basic })).json()) as {
      action: string;
      actor: string;
      details: Record<string, unknown>;
    }[];
    expect(audit.filter((a) => a.actor === 'ops').map((a) => a.action)).toEqual(
      expect.arrayContaining(['rebuild-takeover', 'rebuild-resumed', 'rebuild-paused']),
    );
  },
);

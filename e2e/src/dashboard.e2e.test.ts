// The demo's ops dashboard in a real Chromium (Debian's, driven by playwright-core): an operator
// finds order-stats dead on a poison event, skips the event, and watches the consumer recover.
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { buildApp, OPS_PREFIX } from '@sluice/demo/app';
import { useTestDatabase } from '@sluice/testing/vitest';
import { chromium } from 'playwright-core';
import { expect, onTestFinished, test } from 'vitest';

const CHROMIUM = process.env['CHROMIUM_PATH'] ?? '/usr/bin/chromium';
const SCREENSHOTS = new URL('../artifacts/', import.meta.url);
const PASSWORD = 'e2e-ops-password';
const hasChromium = existsSync(CHROMIUM);
// CI installs Chromium and sets SLUICE_REQUIRE_BROWSER: there a missing browser fails the run.
if (!hasChromium && process.env['SLUICE_REQUIRE_BROWSER']) {
  throw new Error(`no Chromium at ${CHROMIUM}: install Debian's chromium package (or set CHROMIUM_PATH)`);
}

const db = await useTestDatabase();

test.skipIf(!hasChromium)(
  'an operator skips a poison event from the dashboard and order-stats recovers',
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

    const order = (customer: string) =>
      fetch(`${base}/orders`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ customer, items: [{ sku: 'TEA-1', quantity: 1, priceCents: 450 }] }),
      });
    await order('ada@example.com');
    const poison = (await (await fetch(`${base}/demo/poison`, { method: 'POST' })).json()) as {
      eventId: string;
    };
    await order('grace@example.com');
    await order('bounce@example.com'); // goes to the mailer's dead letters: the mailer goes on

    const browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
    onTestFinished(() => browser.close());
    const context = await browser.newContext({
      httpCredentials: { username: 'ops', password: PASSWORD },
      viewport: { width: 1600, height: 900 },
    });
    const page = await context.newPage();
    const pageErrors: string[] = [];
    page.on('pageerror', (error) => pageErrors.push(error.message));
    await page.goto(`${base}${OPS_PREFIX}/`);

    const stats = page.locator('[data-consumer="order-stats"]');
    await expect
      .poll(() => stats.locator('[data-status]').getAttribute('data-status'), { timeout: 30_000 })
      .toBe('dead');
    await stats.locator('[data-action="skip"]').click();
    const dialog = page.locator('dialog[open]');
    await expect.poll(() => dialog.count()).toBe(1);
    // The skip is pre-filled with the event the consumer is stuck on.
    expect(await dialog.locator('input').first().inputValue()).toBe(poison.eventId);
    await dialog.locator('[data-confirm]').click();
    await expect.poll(() => page.locator('#result').textContent(), { timeout: 10_000 }).toMatch(/skip/i);

    await expect
      .poll(() => stats.locator('[data-status]').getAttribute('data-status'), { timeout: 30_000 })
      .toBe('idle');
    await expect
      .poll(() => stats.locator('[data-lag-events]').getAttribute('data-lag-events'), { timeout: 30_000 })
      .toBe('0');
    // Focus went back to the Skip button at the far right of the scrolled table: show it from the left.
    await page.evaluate("document.querySelectorAll('.table-wrap').forEach((w) => { w.scrollLeft = 0; })");
    await mkdir(SCREENSHOTS, { recursive: true });
    await page.screenshot({ path: new URL('dashboard-recovered.png', SCREENSHOTS).pathname, fullPage: true });
    expect(pageErrors).toEqual([]);

    const audit = (await (
      await fetch(`${base}${OPS_PREFIX}/audit`, {
        headers: { authorization: `Basic ${Buffer.from(`ops:${PASSWORD}`).toString('base64')}` },
      })
    ).json()) as { action: string; actor: string }[];
    expect(audit[0]).toMatchObject({ action: 'skip', actor: 'ops' });
  },
);

// The attack of a cross-site form in a real Chromium (Debian's, driven by playwright-core): an
// operator signs in to the dashboard of an app that registers @fastify/formbody, then opens a page
// of another site that submits a form to every write route of the ops routes. The browser sends
// the operator's Basic credentials with each; every one must be refused and nothing may change.
import { existsSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import formbody from '@fastify/formbody';
import { migrate, silentLogger } from '@sluice/core';
import sluice, { basicAuth } from '@sluice/fastify';
import { appendEvents, failingOn, recordingConsumer } from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import Fastify from 'fastify';
import { chromium } from 'playwright-core';
import { expect, onTestFinished, test } from 'vitest';

const CHROMIUM = process.env['CHROMIUM_PATH'] ?? '/usr/bin/chromium';
const hasChromium = existsSync(CHROMIUM);
// CI installs Chromium and sets SLUICE_REQUIRE_BROWSER: there a missing browser fails the run.
if (!hasChromium && process.env['SLUICE_REQUIRE_BROWSER']) {
  throw new Error(`no Chromium at ${CHROMIUM}: install Debian's chromium package (or set CHROMIUM_PATH)`);
}
const OPERATOR = { username: 'ops', password: 'cross-site-e2e-password' };

const db = await useTestDatabase();

/** Escapes text for an HTML attribute value. */
const attribute = (text: string) =>
  text.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

test.skipIf(!hasChromium)(
  'a form on another site, submitted with the cached Basic credentials, changes nothing',
  async () => {
    const schema = `x_${Date.now().toString(36)}`;
    await migrate(db.sql, { schema, logger: silentLogger });
    const app = Fastify({ logger: false });
    const writes: { url: string; fields: string[] }[] = [];
    app.addHook('onRoute', (route) => {
      if ((route.config as { write?: unknown } | undefined)?.write !== true) return;
      const body = route.schema?.body as { properties?: object } | undefined;
      writes.push({ url: route.url, fields: Object.keys(body?.properties ?? {}) });
    });
    // What the server answered to each form (the first answer to each may be a 401 challenge).
    const answered: { url: string; status: number }[] = [];
    app.addHook('onResponse', async (request, reply) => {
      if (request.method === 'POST') answered.push({ url: request.url, status: reply.statusCode });
    });
    // The host's form parser: without the ops routes' checks, it would turn the forms into bodies.
    await app.register(formbody);
    await app.register(sluice, {
      sql: db.sql,
      schema,
      consumers: [
        failingOn('mailer', (e) => e.id === 2n, { errorPolicy: { maxAttempts: 1 } }).consumer,
        recordingConsumer('feed').consumer,
      ],
      listen: false,
      pollIntervalMs: 3_600_000,
      logger: silentLogger,
      ops: { auth: basicAuth(OPERATOR) },
    });
    onTestFinished(() => app.close());
    await app.listen({ port: 0, host: '127.0.0.1' });
    const target = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
    expect(writes.length).toBe(14);

    // mailer dead on event 2 (so a skip, restart or replay would move it), feed idle.
    await appendEvents(db.sql, 3, undefined, schema);
    await app.sluice.dispatcher.runOnce();
    const state = async () => ({
      consumers: await db.sql`select * from ${db.sql(`${schema}.consumers`)} order by name, instance_id`,
      deadLetters: await db.sql`select * from ${db.sql(`${schema}.dead_letters`)} order by id`,
      audit: await db.sql`select * from ${db.sql(`${schema}.audit`)} order by id`,
    });
    const before = await state();
    expect(before.consumers.find((c) => c['name'] === 'mailer')).toMatchObject({ status: 'dead' });

    // The other site: `localhost` is not the same site as `127.0.0.1`. Its page `?i=<n>` submits a
    // form to the n-th write route as soon as it loads, in the top frame (a browser answers an
    // authentication challenge there, and sends the credentials it holds for the server).
    const values: Record<string, string> = {
      from: 'now',
      eventId: '2',
      reason: 'cross-site',
      key: 'stream-1',
      lanes: '2',
      force: 'true',
      dropSource: 'true',
    };
    const forms = writes.map((write) => {
      const action = `${target}${write.url.replace(':name', 'mailer').replace(':version', '1')}`;
      const inputs = write.fields
        .filter((field) => field in values)
        .map((field) => `<input name="${field}" value="${attribute(values[field] ?? '')}">`)
        .join('');
      return `<form method="post" action="${attribute(action)}">${inputs}</form>`;
    });
    const attacker = Fastify({ logger: false });
    attacker.get<{ Querystring: { i?: string } }>('/', (request, reply) =>
      reply
        .type('text/html; charset=utf-8')
        .send(
          `<!doctype html><title>prize</title>${forms[Number(request.query.i)] ?? ''}` +
            '<script>document.forms[0].submit();</script>',
        ),
    );
    onTestFinished(() => attacker.close());
    await attacker.listen({ port: 0, host: '127.0.0.1' });
    const evil = `http://localhost:${(attacker.server.address() as AddressInfo).port}/`;

    const browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
    onTestFinished(() => browser.close());
    const context = await browser.newContext({ httpCredentials: OPERATOR });
    const page = await context.newPage();
    // The operator has the dashboard open: the browser holds the credentials for the server.
    const dashboard = await page.goto(`${target}/sluice/`);
    expect(dashboard?.status()).toBe(200);
    const authenticated = () => answered.filter((a) => a.status !== 401);
    for (const [i, write] of writes.entries()) {
      await page.goto(`${evil}?i=${i}`);
      await expect
        .poll(() => authenticated().length, { timeout: 30_000, message: `the form to ${write.url}` })
        .toBe(i + 1);
    }

    expect(authenticated().map((a) => a.status)).toEqual(writes.map(() => 403));
    expect(await state()).toEqual(before);
  },
);

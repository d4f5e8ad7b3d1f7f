import { randomBytes } from 'node:crypto';
import { migrate, silentLogger, type Consumer } from '@sluice/core';
import { appendEvents, failingOn, recordingConsumer } from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import Fastify, { type FastifyInstance } from 'fastify';
import { describe, expect, onTestFinished, test } from 'vitest';
import sluice, { bearerAuth, type OpsOptions } from './index.js';

const db = await useTestDatabase();
const TOKEN = 'test-token-0123456789abcdef';
const auth = { authorization: `Bearer ${TOKEN}` };

async function build(
  consumers: readonly Consumer[],
  ops: OpsOptions | undefined = { auth: bearerAuth(TOKEN, 'alice') },
) {
  const schema = `f_${randomBytes(4).toString('hex')}`;
  await migrate(db.sql, { schema, logger: silentLogger });
  // Consumer names may be up to 200 bytes; Fastify's default maxParamLength is 100.
  const app = Fastify({ logger: false, maxParamLength: 1000 });
  const routes: { method: string; url: string }[] = [];
  app.addHook('onRoute', (route) => {
    for (const method of [route.method].flat())
      if (method !== 'HEAD') routes.push({ method, url: route.url });
  });
  await app.register(sluice, {
    sql: db.sql,
    schema,
    consumers,
    listen: false,
    pollIntervalMs: 60_000,
    logger: silentLogger,
    rearmCooldownMs: 3_600_000,
    retryDelayMs: 0,
    ops,
  });
  onTestFinished(() => app.close());
  await app.ready();
  return { app, schema, routes };
}

async function stateOf(schema: string) {
  return db.sql`select name, instance_id, cursor::text, status, attempts from ${db.sql(`${schema}.consumers`)} order by 1, 2`;
}

async function auditCount(schema: string): Promise<number> {
  const [row] = await db.sql<{ n: number }[]>`select count(*)::int as n from ${db.sql(`${schema}.audit`)}`;
  return row?.n ?? -1;
}

/** A consumer dead on event 2 (cursor 1). */
async function deadMailer(app: FastifyInstance, schema: string) {
  await appendEvents(db.sql, 3, undefined, schema);
  await app.sluice.dispatcher.runOnce();
}

describe('plugin lifecycle', () => {
  test('refuses to register ops routes without auth and without insecure', async () => {
    const app = Fastify({ logger: false });
    onTestFinished(() => app.close());
    const boot = async () => {
      await app.register(sluice, {
        sql: db.sql,
        consumers: [recordingConsumer('a').consumer],
        listen: false,
        ops: {},
      });
      await app.ready();
    };
    await expect(boot()).rejects.toMatchObject({ code: 'SLUICE_INVALID_OPTION', option: 'ops.auth' });
  });

  test('insecure ops routes are allowed but logged loudly at boot', async () => {
    const lines: string[] = [];
    const app = Fastify({ logger: { level: 'warn', stream: { write: (line: string) => lines.push(line) } } });
    onTestFinished(() => app.close());
    await app.register(sluice, {
      sql: db.sql,
      consumers: [recordingConsumer('a').consumer],
      listen: false,
      logger: silentLogger,
      ops: { insecure: true },
    });
    await app.ready();
    expect(lines.join('\n')).toContain('SLUICE OPS ROUTES ARE OPEN WITHOUT AUTHENTICATION');
    expect((await app.inject({ method: 'GET', url: '/sluice/consumers' })).statusCode).toBe(200);
  });

  test('migrates and starts in onReady, appends through the decorator, and stops in onClose', async () => {
    const c = recordingConsumer('projection');
    const { app, schema } = await build([c.consumer]);
    await app.sluice.transaction((tx) =>
      app.sluice.append(tx, [{ streamId: 's', type: 'Added', data: { x: 1 } }]),
    );
    await app.sluice.dispatcher.drain();
    await app.sluice.dispatcher.runOnce();
    expect(c.ids()).toEqual([1n]);
    expect(app.sluice.schema).toBe(schema);
    await app.close();
    // Stopped: a new event is not handled any more.
    await appendEvents(db.sql, 1, undefined, schema);
    expect(c.ids()).toEqual([1n]);
  });
});

describe('ops routes', () => {
  test('every route answers 401 without (or with wrong) credentials, and nothing changes', async () => {
    const { app, schema, routes } = await build([
      failingOn('mailer', (e) => e.id === 2n, { errorPolicy: { maxAttempts: 1 } }).consumer,
    ]);
    await deadMailer(app, schema);
    const before = await stateOf(schema);
    const opsRoutes = routes.filter((r) => r.url.startsWith('/sluice'));
    expect(opsRoutes.length).toBeGreaterThanOrEqual(11);
    for (const route of opsRoutes) {
      const url = route.url.replace(':name', 'mailer');
      for (const headers of [
        {},
        { authorization: 'Bearer wrong-token-000000000' },
        { authorization: TOKEN },
        { authorization: '' },
      ]) {
        const response = await app.inject({
          method: route.method as 'GET' | 'POST',
          url,
          headers,
          ...(route.method === 'POST' ? { payload: { from: '0', eventId: '2' } } : {}),
        });
        expect(response.statusCode, `${route.method} ${url}`).toBe(401);
      }
    }
    expect(await stateOf(schema)).toEqual(before);
    expect(await auditCount(schema)).toBe(0);
  });

  test('lists, shows and diagnoses consumers with ids as strings', async () => {
    const { app, schema } = await build([
      failingOn('mailer', (e) => e.id === 2n, { errorPolicy: { maxAttempts: 1 } }).consumer,
    ]);
    await deadMailer(app, schema);
    const list = await app.inject({ method: 'GET', url: '/sluice/consumers', headers: auth });
    expect(list.statusCode).toBe(200);
    expect(list.json()).toEqual([
      expect.objectContaining({
        name: 'mailer',
        status: 'dead',
        cursor: '1',
        head: '3',
        lagEvents: '2',
        stuckEventId: '2',
      }),
    ]);
    const show = await app.inject({ method: 'GET', url: '/sluice/consumers/mailer', headers: auth });
    expect(show.json()).toMatchObject({ name: 'mailer', gaps: [] });
    const diagnose = await app.inject({
      method: 'GET',
      url: '/sluice/consumers/mailer/diagnose',
      headers: auth,
    });
    expect(diagnose.json<{ findings: string[] }>().findings[0]).toContain(
      'dead after 1 failed attempt(s) on event 2',
    );
  });

  test('a wrong-event skip is 409 and changes nothing; the right one is 200 and audited with the actor', async () => {
    const { app, schema } = await build([
      failingOn('mailer', (e) => e.id === 2n, { errorPolicy: { maxAttempts: 1 } }).consumer,
    ]);
    await deadMailer(app, schema);
    const before = await stateOf(schema);
    const wrong = await app.inject({
      method: 'POST',
      url: '/sluice/consumers/mailer/skip',
      headers: auth,
      payload: { eventId: '3' },
    });
    expect(wrong.statusCode).toBe(409);
    expect(wrong.json()).toMatchObject({ code: 'SLUICE_SKIP_MISMATCH' });
    expect(await stateOf(schema)).toEqual(before);
    const right = await app.inject({
      method: 'POST',
      url: '/sluice/consumers/mailer/skip',
      headers: auth,
      payload: { eventId: '2' },
    });
    expect(right.statusCode).toBe(200);
    expect(right.json()).toMatchObject({ action: 'skip', eventId: '2', statusAfter: 'idle' });
    const audit = await app.inject({ method: 'GET', url: '/sluice/audit', headers: auth });
    expect(audit.json()).toEqual([
      expect.objectContaining({ action: 'skip', actor: 'alice', consumer: 'mailer' }),
    ]);
  });

  test('a long or odd authenticated identity is audited cut to 200 bytes between characters, not refused', async () => {
    const identity = `alice\ud800${'é'.repeat(200)}`;
    const { app } = await build([recordingConsumer('feed').consumer], { auth: () => identity });
    const response = await app.inject({
      method: 'POST',
      url: '/sluice/consumers/feed/disable',
      headers: auth,
      payload: {},
    });
    expect(response.statusCode, response.body).toBe(200);
    const audit = await app.inject({ method: 'GET', url: '/sluice/audit', headers: auth });
    const [entry] = audit.json<{ actor: string }[]>();
    // 5 + 3 (U+FFFD for the lone surrogate) + 96 × 2 = 200 bytes.
    expect(entry?.actor).toBe(`alice\uFFFD${'é'.repeat(96)}`);
  });

  test('unknown consumers are 404; SQL meta-characters in names are just names', async () => {
    const odd = `o'brien"; drop table events; --`;
    const { app, schema } = await build([recordingConsumer(odd).consumer]);
    for (const url of [
      '/sluice/consumers/nobody',
      "/sluice/consumers/x'%20or%20'1'='1",
      '/sluice/consumers/..%2F..%2Fetc',
    ]) {
      const response = await app.inject({ method: 'GET', url, headers: auth });
      expect(response.statusCode, url).toBe(404);
      expect(response.json()).toMatchObject({ code: 'SLUICE_CONSUMER_NOT_FOUND' });
    }
    const disabled = await app.inject({
      method: 'POST',
      url: `/sluice/consumers/${encodeURIComponent(odd)}/disable`,
      headers: auth,
      payload: {},
    });
    expect(disabled.statusCode).toBe(200);
    expect((await stateOf(schema))[0]).toMatchObject({ name: odd, status: 'disabled' });
  });

  test.each([
    ['a NUL in the name', 'POST', '/sluice/consumers/a%00b/enable', {}],
    ['a name over 200 characters', 'POST', `/sluice/consumers/${'n'.repeat(201)}/enable`, {}],
    ['an event id that is not a number', 'POST', '/sluice/consumers/mailer/skip', { eventId: 'abc' }],
    ['a negative event id', 'POST', '/sluice/consumers/mailer/skip', { eventId: '-1' }],
    ['an exponent', 'POST', '/sluice/consumers/mailer/skip', { eventId: '1e3' }],
    [
      'an id beyond 2^53 sent as a JSON number',
      'POST',
      '/sluice/consumers/mailer/skip',
      '{"eventId": 9007199254740993}',
    ],
    ['an id beyond int8', 'POST', '/sluice/consumers/mailer/skip', { eventId: '99999999999999999999' }],
    ['a missing event id', 'POST', '/sluice/consumers/mailer/skip', {}],
    ['a restart without from', 'POST', '/sluice/consumers/mailer/restart', {}],
    ['a restart from yesterday', 'POST', '/sluice/consumers/mailer/restart', { from: 'yesterday' }],
    [
      'a disable until a past time',
      'POST',
      '/sluice/consumers/mailer/disable',
      { until: '2001-01-01T00:00:00Z' },
    ],
    ['a disable until a non-date', 'POST', '/sluice/consumers/mailer/disable', { until: 'soon' }],
    ['a limit of zero', 'GET', '/sluice/consumers/mailer/dead-letters?limit=0', undefined],
    ['a limit that is text', 'GET', '/sluice/audit?limit=all', undefined],
    ['a body that is an array', 'POST', '/sluice/consumers/mailer/skip', '[1]'],
    ['malformed JSON', 'POST', '/sluice/consumers/mailer/skip', '{"eventId": '],
    [
      'a __proto__ key',
      'POST',
      '/sluice/consumers/mailer/skip',
      '{"eventId": "2", "__proto__": {"admin": true}}',
    ],
    [
      'an unpaired UTF-16 surrogate in a reason',
      'POST',
      '/sluice/consumers/mailer/disable',
      '{"reason": "x\\ud800y"}',
    ],
    [
      'a body nested 10,000 levels deep',
      'POST',
      '/sluice/consumers/mailer/skip',
      `{"eventId": "2", "reason": ${'['.repeat(10_000)}${']'.repeat(10_000)}}`,
    ],
  ])('rejects %s with 400 and changes nothing', async (_label, method, url, payload) => {
    const { app, schema } = await build([
      failingOn('mailer', (e) => e.id === 2n, { errorPolicy: { maxAttempts: 1 } }).consumer,
    ]);
    await deadMailer(app, schema);
    const before = await stateOf(schema);
    const response = await app.inject({
      method: method as 'GET' | 'POST',
      url,
      headers: { ...auth, ...(typeof payload === 'string' ? { 'content-type': 'application/json' } : {}) },
      ...(payload === undefined ? {} : { payload }),
    });
    expect(response.statusCode, response.body).toBe(400);
    expect(await stateOf(schema)).toEqual(before);
    expect(await auditCount(schema)).toBe(0);
  });

  test('read-only mode answers 405 to every write route and still serves reads', async () => {
    const { app, schema, routes } = await build([recordingConsumer('feed').consumer], {
      auth: bearerAuth(TOKEN),
      readOnly: true,
    });
    const writes = routes.filter((r) => r.url.startsWith('/sluice') && r.method === 'POST');
    expect(writes.map((r) => r.url.replace('/sluice/consumers/:name/', '')).sort()).toEqual([
      'dead-letters/replay',
      'disable',
      'enable',
      'fence',
      'restart',
      'skip',
    ]);
    for (const route of writes) {
      const response = await app.inject({
        method: 'POST',
        url: route.url.replace(':name', 'feed'),
        headers: auth,
        payload: { from: '0', eventId: '1' },
      });
      expect(response.statusCode, route.url).toBe(405);
    }
    expect((await app.inject({ method: 'GET', url: '/sluice/consumers', headers: auth })).statusCode).toBe(
      200,
    );
    expect(await auditCount(schema)).toBe(0);
  });

  test('dead-letter payloads pass through the redaction option', async () => {
    const c = failingOn('mailer', (e) => e.id === 1n, {
      errorPolicy: { maxAttempts: 1, skipApplyErrors: true },
    });
    const { app, schema } = await build([c.consumer], {
      auth: bearerAuth(TOKEN),
      redact: ({ data }) => ({ data: { ...data, n: '[redacted]' }, metadata: {} }),
    });
    await appendEvents(db.sql, 1, undefined, schema);
    await app.sluice.dispatcher.runOnce();
    const response = await app.inject({
      method: 'GET',
      url: '/sluice/consumers/mailer/dead-letters',
      headers: auth,
    });
    expect(response.json()).toEqual([
      expect.objectContaining({ eventId: '1', data: { n: '[redacted]' }, metadata: {} }),
    ]);
  });

  test('restart, disable for a duration, enable, replay and fence go through with their results', async () => {
    const c = failingOn('mailer', (e) => e.id === 2n, {
      errorPolicy: { maxAttempts: 1, skipApplyErrors: true },
    });
    const { app, schema } = await build([c.consumer]);
    await appendEvents(db.sql, 3, undefined, schema);
    await app.sluice.dispatcher.runOnce();
    const post = (url: string, payload: object) =>
      app.inject({ method: 'POST', url: `/sluice/consumers/mailer/${url}`, headers: auth, payload });
    expect((await post('disable', { forMs: 60_000, reason: 'deploy' })).json()).toMatchObject({
      statusAfter: 'disabled',
    });
    expect((await post('enable', {})).json()).toMatchObject({ statusAfter: 'idle' });
    expect((await post('dead-letters/replay', { dryRun: true })).json()).toMatchObject({
      count: 1,
      dryRun: true,
    });
    expect((await post('restart', { from: 'now' })).json()).toMatchObject({ cursorAfter: '3' });
    expect((await post('fence', { eventId: '1' })).statusCode).toBe(409); // not a gap
    const actions = (
      await app.inject({ method: 'GET', url: '/sluice/audit?consumer=mailer', headers: auth })
    ).json<{ action: string }[]>();
    expect(actions.map((a) => a.action)).toEqual(['restart', 'enable', 'disable']);
  });

  test('health is a readiness probe: ok while running, degraded with a dead consumer', async () => {
    const { app, schema } = await build([
      failingOn('mailer', (e) => e.id === 2n, { errorPolicy: { maxAttempts: 1 } }).consumer,
    ]);
    const healthy = await app.inject({ method: 'GET', url: '/sluice/health', headers: auth });
    expect(healthy.statusCode).toBe(200);
    expect(healthy.json()).toMatchObject({ status: 'ok', running: true, deadConsumers: [] });
    await deadMailer(app, schema);
    const degraded = await app.inject({ method: 'GET', url: '/sluice/health', headers: auth });
    expect(degraded.json()).toMatchObject({
      status: 'degraded',
      deadConsumers: ['mailer'],
      maxLagEvents: '2',
    });
  });
});

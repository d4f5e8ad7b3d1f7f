import { randomBytes } from 'node:crypto';
import { createServer as createHttpServer } from 'node:http';
import { connect, createServer as createTcpServer, type AddressInfo, type Socket } from 'node:net';
import { silentLogger, type Consumer, type Sql } from '@sluice/core';
import {
  appendEvents,
  drainUntilIdle,
  failingOn,
  freshSchema,
  gate,
  holdGap,
  passUntil,
  recordingConsumer,
  until,
} from '@sluice/testing';
import { heldTransaction, listening, useTestDatabase } from '@sluice/testing/vitest';
import postgres from 'postgres';
import Fastify, { type FastifyInstance, type FastifyServerOptions, type InjectOptions } from 'fastify';
import { describe, expect, onTestFinished, test } from 'vitest';
import sluice, { basicAuth, bearerAuth, type OpsOptions } from './index.js';
import { HEALTH_READ_MS } from './routes/health.js';
import { pluginApp } from './test-support.js';

const db = await useTestDatabase();

/**
 * Registers the plugin on a pool to 127.0.0.1:`port` (not PostgreSQL) and readies the app: what
 * ready() failed with and how long it took. The app and the pool are closed after the test.
 */
async function readyAgainst(
  port: number,
  pool: { connect_timeout?: number },
  server: FastifyServerOptions,
): Promise<{ error: unknown; elapsedMs: number }> {
  const sql = postgres(`postgres://nobody:secret@127.0.0.1:${port}/nothing`, {
    max: 1,
    onnotice: () => undefined,
    ...pool,
  }) as unknown as Sql;
  onTestFinished(() => sql.end({ timeout: 0 }));
  const app = Fastify({ logger: false, ...server });
  onTestFinished(() => app.close());
  await app.register(sluice, {
    sql,
    consumers: [recordingConsumer('never').consumer],
    listen: false,
    logger: silentLogger,
  });
  const startedAt = performance.now();
  const error = await app.ready().then(
    () => undefined,
    (e: unknown) => e,
  );
  return { error, elapsedMs: performance.now() - startedAt };
}
const TOKEN = 'test-token-0123456789abcdef';
const auth = { authorization: `Bearer ${TOKEN}` };

/** How the host app is set up around the plugin. */
interface Host {
  readonly server?: FastifyServerOptions;
  /** Runs on the host app before the plugin is registered (e.g. its own body parsers). */
  readonly before?: (app: FastifyInstance) => void;
}

async function build(
  consumers: readonly Consumer[],
  ops: OpsOptions | undefined = { auth: bearerAuth(TOKEN, 'alice') },
  host: Host = {},
) {
  const routes: { method: string; url: string; write: boolean; shell: boolean; bodyFields: string[] }[] = [];
  const { app, schema } = await pluginApp(db.sql, consumers, ops, {
    // Consumer names may be up to 200 bytes; Fastify's default maxParamLength is 100.
    server: { routerOptions: { maxParamLength: 1000 }, ...host.server },
    before: (app) => {
      host.before?.(app);
      app.addHook('onRoute', (route) => {
        const config = route.config as { write?: unknown; shell?: unknown } | undefined;
        const write = config?.write === true;
        const shell = config?.shell === true;
        const body = route.schema?.body as { properties?: object } | undefined;
        const bodyFields = Object.keys(body?.properties ?? {});
        for (const method of [route.method].flat())
          if (method !== 'HEAD') routes.push({ method, url: route.url, write, shell, bodyFields });
      });
    },
    options: { rearmCooldownMs: 3_600_000, retryDelayMs: 0 },
  });
  return { app, schema, routes };
}

/**
 * A TCP relay to the test server that can go silent as a network that drops packets does: it keeps
 * the connections open and forwards nothing, on every connection (silenceAll) or only on those open
 * now (silenceExisting: later ones get through). `heal` cuts every connection open now and lets
 * new ones through.
 */
async function silentRelay() {
  const target = new URL(db.url);
  let all = false;
  const silent = new Set<Socket>();
  const sockets = new Set<Socket>();
  const relay = await listening(
    createTcpServer((client) => {
      const upstream = connect(Number(target.port || 5432), target.hostname);
      sockets.add(client).add(upstream);
      const through = () => !all && !silent.has(client);
      client.on('data', (chunk) => {
        if (through()) upstream.write(chunk);
      });
      upstream.on('data', (chunk) => {
        if (through()) client.write(chunk);
      });
      client.on('error', () => undefined);
      upstream.on('error', () => undefined);
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    }),
  );
  onTestFinished(() => {
    for (const socket of sockets) socket.destroy();
  });
  return {
    pool(options: postgres.Options<Record<string, postgres.PostgresType>> = {}) {
      const url = new URL(db.url);
      url.host = `127.0.0.1:${relay.port}`;
      const sql = postgres(url.toString(), {
        max: 2,
        onnotice: () => undefined,
        ...options,
      }) as unknown as Sql;
      onTestFinished(() => sql.end({ timeout: 0 }));
      return sql;
    },
    silenceAll() {
      all = true;
    },
    silenceExisting() {
      for (const socket of sockets) if (!socket.destroyed) silent.add(socket);
    },
    heal() {
      all = false;
      silent.clear();
      for (const socket of sockets) socket.destroy();
    },
  };
}

/** A request with the operator's bearer token. */
const authed = (
  app: FastifyInstance,
  method: 'GET' | 'POST',
  url: string,
  payload?: InjectOptions['payload'],
) => app.inject({ method, url, headers: auth, ...(payload === undefined ? {} : { payload }) });

async function stateOf(schema: string) {
  return db.sql`select name, instance_id, cursor::text, status, attempts from ${db.sql(`${schema}.consumers`)} order by 1, 2`;
}

async function auditCount(schema: string): Promise<number> {
  const [row] = await db.sql<{ n: number }[]>`select count(*)::int as n from ${db.sql(`${schema}.audit`)}`;
  return row?.n ?? -1;
}

/** A consumer dead on event 2 (cursor 1). */
/** Registers the plugin with `ops` (and `extra` options) on a host app of its own (closed after the test), up to ready. */
async function boot(ops: OpsOptions | undefined, extra: Record<string, unknown> = {}) {
  const app = Fastify({ logger: false });
  onTestFinished(() => app.close());
  await app.register(sluice, {
    sql: db.sql,
    consumers: [recordingConsumer('a').consumer],
    listen: false,
    ...(ops === undefined ? {} : { ops }),
    ...extra,
  });
  await app.ready();
  return app;
}

async function deadMailer(app: FastifyInstance, schema: string) {
  await appendEvents(db.sql, 3, undefined, schema);
  await app.sluice.dispatcher.runOnce();
}

describe('plugin lifecycle', () => {
  test('refuses to register ops routes without auth and without insecure', async () => {
    await expect(boot({})).rejects.toMatchObject({ code: 'SLUICE_INVALID_OPTION', option: 'ops.auth' });
  });

  test.each([
    ['readOnly as a string (from an environment variable)', { readOnly: 'true' }, 'ops.readOnly'],
    ['a misspelt readOnly', { readonly: true }, 'ops.readonly'],
    ['insecure as a string', { insecure: 'true' }, 'ops.insecure'],
    ['redact that is not a function', { redact: 'x' }, 'ops.redact'],
    ["a prefix with '..'", { prefix: '/a/../b' }, 'ops.prefix'],
    ['a prefix with an empty segment', { prefix: '/a//b' }, 'ops.prefix'],
    ['a lock timeout of 0', { lockTimeoutMs: 0 }, 'ops.lockTimeoutMs'],
    ['a lock timeout beyond a timer', { lockTimeoutMs: 2 ** 31 }, 'ops.lockTimeoutMs'],
  ])('an ops option of the wrong shape is refused at registration: %s', async (_label, given, option) => {
    await expect(
      boot({
        auth: basicAuth({ username: 'operator', password: 'correct-horse-battery' }),
        ...given,
      } as OpsOptions),
    ).rejects.toMatchObject({
      code: 'SLUICE_INVALID_OPTION',
      option,
    });
  });

  test("Fastify's prefix on the registration is refused: the plugin's context would not apply it", async () => {
    const app = Fastify();
    onTestFinished(() => app.close());
    await expect(
      app.register(sluice, {
        prefix: '/internal',
        sql: db.sql,
        consumers: [recordingConsumer('p').consumer],
        ops: { insecure: true },
      } as never),
    ).rejects.toMatchObject({ code: 'SLUICE_INVALID_OPTION', option: 'prefix' });
  });

  test('an event nested thousands of levels deep is shown by the event route, down to a thousand levels', async () => {
    const { app, schema } = await build([recordingConsumer('reader').consumer]);
    // Written as text: PostgreSQL stores deeper jsonb than append()'s JSON.stringify writes.
    const nested = (depth: number) => `${'{"next":['.repeat(depth)}{"leaf":1}${']}'.repeat(depth)}`;
    for (const depth of [400, 3_000]) {
      await db.sql`insert into ${db.sql(`${schema}.events`)} (stream_id, type, data)
                   values ('deep', 'Deep', ${nested(depth)}::text::jsonb)`;
    }
    // 800 levels (an object and an array each): shown whole.
    const shallow = await authed(app, 'GET', '/sluice/consumers/reader/events/1');
    expect(shallow.statusCode, shallow.body.slice(0, 300)).toBe(200);
    expect(shallow.body).toContain(nested(400));
    // 6,000 levels: the first thousand, then what stands for the rest.
    const deep = await authed(app, 'GET', '/sluice/consumers/reader/events/2');
    expect(deep.statusCode, deep.body.slice(0, 300)).toBe(200);
    expect(deep.body).toContain(
      `${'{"next":['.repeat(499)}{"next":"[nested deeper than 1000 levels: not shown]"}`,
    );
  });

  test("ops at prefix '/' leave the host app's unknown paths, and its own not-found handler, to the host", async () => {
    // Registered before the plugin, as after it: Fastify allows one not-found handler per prefix.
    for (const hostFirst of [true, false]) {
      const app = Fastify({ logger: false });
      onTestFinished(() => app.close());
      const hostNotFound = (instance: FastifyInstance) =>
        instance.setNotFoundHandler((_request, reply) => reply.code(404).send({ host: 'not here' }));
      if (hostFirst) hostNotFound(app);
      await app.register(sluice, {
        sql: db.sql,
        consumers: [recordingConsumer('a').consumer],
        listen: false,
        ops: { auth: bearerAuth(TOKEN), prefix: '/' },
      });
      if (!hostFirst) hostNotFound(app);
      app.get('/shop', () => ({ shop: true }));
      await app.ready();
      expect((await app.inject({ method: 'GET', url: '/shop' })).json()).toEqual({ shop: true });
      // No credentials asked for on a path that is not an ops route: the host's own answer.
      const unknown = await app.inject({ method: 'GET', url: '/no-such-page' });
      expect(unknown.statusCode, unknown.body).toBe(404);
      expect(unknown.json()).toEqual({ host: 'not here' });
      const consumers = await app.inject({ method: 'GET', url: '/consumers', headers: auth });
      expect(consumers.statusCode, consumers.body).toBe(200);
      expect((await app.inject({ method: 'GET', url: '/consumers' })).statusCode).toBe(401);
    }
  });

  test("a misspelt dispatcher option is refused at registration; Fastify's own register options are not Sluice's", async () => {
    await expect(boot(undefined, { pollInterval: 100 })).rejects.toMatchObject({
      code: 'SLUICE_INVALID_OPTION',
      option: 'pollInterval',
    });
    const app = await boot(undefined, { logLevel: 'warn', pollIntervalMs: 100 });
    expect(app.sluice.dispatcher.consumers.map((c) => c.name)).toEqual(['a']);
  });

  test('migrate that is not a boolean is refused at registration, before anything touches the database', async () => {
    const app = Fastify({ logger: false });
    onTestFinished(() => app.close());
    const registered = app.register(sluice, {
      sql: db.sql,
      consumers: [recordingConsumer('a').consumer],
      listen: false,
      migrate: 'no' as unknown as boolean,
    });
    await expect(registered).rejects.toMatchObject({ code: 'SLUICE_INVALID_OPTION', option: 'migrate' });
  });

  test('insecure ops routes are allowed but logged loudly at boot', async () => {
    const lines: string[] = [];
    const logger = { level: 'warn', stream: { write: (line: string) => lines.push(line) } };
    const consumers = [recordingConsumer('a').consumer];
    const { app } = await pluginApp(db.sql, consumers, { insecure: true }, { server: { logger } });
    expect(lines.join('\n')).toContain('SLUICE OPS ROUTES ARE OPEN WITHOUT AUTHENTICATION');
    expect((await app.inject({ method: 'GET', url: '/sluice/consumers' })).statusCode).toBe(200);
    for (const host of [
      'localhost:3000',
      'localhost.:3000',
      '127.0.0.1',
      '127.0.0.1:3000',
      '[::1]:3000',
      '[::1]',
    ]) {
      const answer = await app.inject({ method: 'GET', url: '/sluice/consumers', headers: { host } });
      expect(answer.statusCode, host).toBe(200);
    }
    // A page whose name was made to resolve to 127.0.0.1 (DNS rebinding) is same-origin to the
    // browser under its own Host: refused, reads and writes alike, and nothing changes.
    const rebound = {
      host: 'attacker.example:3000',
      origin: 'http://attacker.example:3000',
      'sec-fetch-site': 'same-origin',
    };
    const read = await app.inject({ method: 'GET', url: '/sluice/consumers', headers: rebound });
    const write = await app.inject({
      method: 'POST',
      url: '/sluice/consumers/a/disable',
      headers: { ...rebound, 'content-type': 'application/json' },
      payload: '{}',
    });
    for (const answer of [read, write]) {
      expect(answer.statusCode).toBe(403);
      expect(answer.json()).toMatchObject({ code: 'SLUICE_CROSS_SITE_REQUEST' });
    }
    expect((await app.sluice.admin.showConsumer('a')).status).not.toBe('disabled');

    // Behind a trusted proxy Fastify reads X-Forwarded-Host, which that page can set: the Host the
    // browser sent decides.
    const { app: proxied } = await pluginApp(
      db.sql,
      consumers,
      { insecure: true },
      {
        server: { trustProxy: true },
      },
    );
    const forwarded = await proxied.inject({
      method: 'GET',
      url: '/sluice/consumers',
      headers: { ...rebound, 'x-forwarded-host': 'localhost' },
    });
    expect(forwarded.statusCode).toBe(403);
  });

  test('ready() and close() called in the same tick both resolve, and leave no connection of Sluice open', async () => {
    for (const closeFirst of [false, true]) {
      const schema = await freshSchema(db.sql, 'tick');
      const instanceId = `tick${Number(closeFirst)}-${Math.random().toString(36).slice(2, 8)}`;
      const app = Fastify({ logger: false });
      await app.register(sluice, {
        sql: db.sql,
        schema,
        instanceId,
        consumers: [recordingConsumer('a').consumer],
        listen: false,
        logger: silentLogger,
      });
      const both = closeFirst ? [app.close(), app.ready()] : [app.ready(), app.close()];
      const settled = await Promise.allSettled(both);
      expect(settled.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled']);
      const [open] = await db.sql<{ n: number }[]>`
        select count(*)::int as n from pg_stat_activity where application_name like ${`%${instanceId}`}`;
      expect(open?.n).toBe(0);
    }
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

  test("onReady against a port where HTTP answers: ready() fails with SLUICE_CONNECT_TIMEOUT after the pool's connect_timeout, and close() returns", async () => {
    const { port } = await listening(
      createHttpServer((_request, response) => response.end('not PostgreSQL')),
    );
    const { error, elapsedMs } = await readyAgainst(port, { connect_timeout: 1 }, {});
    expect(elapsedMs).toBeLessThan(5_000);
    expect(error).toMatchObject({ code: 'SLUICE_CONNECT_TIMEOUT', address: `127.0.0.1:${port}` });
  });

  test("onReady against a port that accepts and never answers, with postgres.js's default connect_timeout (30 s): SLUICE_CONNECT_TIMEOUT before Fastify's pluginTimeout gives up on the hook", async () => {
    const { port } = await listening(createTcpServer(() => undefined));
    const { error, elapsedMs } = await readyAgainst(port, {}, { pluginTimeout: 2_500 });
    expect(elapsedMs).toBeLessThan(2_500);
    expect(error).toMatchObject({
      code: 'SLUICE_CONNECT_TIMEOUT',
      address: `127.0.0.1:${port}`,
      timeoutMs: 2_000,
    });
  });

  test('an ops request whose database stops answering (a network that drops packets) gets its 503 after ops.requestTimeoutMs', async () => {
    const relay = await silentRelay();
    const sql = relay.pool();
    const app = Fastify({ logger: false });
    onTestFinished(async () => {
      // The network back, the silent connections cut: the app can close.
      relay.heal();
      await app.close();
    });
    const schema = await freshSchema(db.sql, 'silent');
    await app.register(sluice, {
      sql,
      schema,
      consumers: [recordingConsumer('c').consumer],
      listen: false,
      pollIntervalMs: 3_600_000,
      logger: silentLogger,
      ops: { auth: bearerAuth(TOKEN, 'alice'), lockTimeoutMs: 100, requestTimeoutMs: 700 },
    });
    await app.ready();
    expect((await authed(app, 'GET', '/sluice/consumers')).statusCode).toBe(200);
    relay.silenceAll();
    for (const [method, url] of [
      ['GET', '/sluice/consumers'],
      ['GET', '/sluice/consumers/c/diagnose'],
      ['POST', '/sluice/consumers/c/disable'],
    ] as const) {
      const startedAt = performance.now();
      const answer = await authed(app, method, url, method === 'POST' ? {} : undefined);
      expect(performance.now() - startedAt).toBeLessThan(5_000);
      expect(answer.statusCode, `${method} ${url}`).toBe(503);
      expect(answer.headers['cache-control']).toBe('no-store');
      expect(answer.json()).toMatchObject({
        code: 'SLUICE_DATABASE_UNAVAILABLE',
        message: expect.stringContaining('did not answer within 700 ms') as unknown,
      });
    }
    // The disable still holds its write slot (its action runs on): of two more writes, one waits
    // for the database and one for a slot, each at most requestTimeoutMs.
    const startedAt = performance.now();
    const more = await Promise.all([
      authed(app, 'POST', '/sluice/consumers/c/enable', {}),
      authed(app, 'POST', '/sluice/consumers/c/restart', { from: 'now' }),
    ]);
    expect(performance.now() - startedAt).toBeLessThan(5_000);
    expect(more.map((r) => [r.statusCode, r.json<{ code: string }>().code])).toEqual([
      [503, 'SLUICE_DATABASE_UNAVAILABLE'],
      [503, 'SLUICE_DATABASE_UNAVAILABLE'],
    ]);
    expect(more.map((r) => r.json<{ message: string }>().message).join('\n')).toContain(
      'earlier actions still wait for the database',
    );
  });

  test('connections gone silent while new ones get through: the request that met one gets its 503, the next ones are answered on fresh connections, and delivery goes on', async () => {
    const relay = await silentRelay();
    const sql = relay.pool({ max: 4 });
    const app = Fastify({ logger: false });
    onTestFinished(async () => {
      relay.heal();
      await app.close();
    });
    const schema = await freshSchema(db.sql, 'silent');
    const c = recordingConsumer('c');
    await app.register(sluice, {
      sql,
      schema,
      consumers: [c.consumer],
      listen: false,
      pollIntervalMs: 100,
      maxTurnMs: 200,
      handlerTimeoutMs: 300,
      statementTimeoutMs: 800,
      logger: silentLogger,
      ops: { auth: bearerAuth(TOKEN, 'alice'), lockTimeoutMs: 100, requestTimeoutMs: 700 },
    });
    await app.ready();
    await appendEvents(db.sql, 1, undefined, schema);
    await until(() => c.ids().length === 1, 10_000, 'the first event');
    expect((await authed(app, 'GET', '/sluice/consumers')).statusCode).toBe(200);
    relay.silenceExisting();
    await appendEvents(db.sql, 3, undefined, schema);
    // The ops request that met a silent connection: 503; the admin's connections are replaced.
    const first = await authed(app, 'GET', '/sluice/consumers');
    expect(first.statusCode).toBe(503);
    const next = await authed(app, 'GET', '/sluice/consumers');
    expect(next.statusCode, next.body).toBe(200);
    // The dispatcher's pre-check and turn on silent connections are bounded: delivery goes on
    // (within a turn's bounds: 200 + 300 + 5 × 800 ms). The turn that delivered 1 may have met the
    // silence at its commit: then it is rolled back and 1 is delivered again, before 2.
    await until(
      () => new Set(c.ids()).size === 4,
      20_000,
      'the events appended once the connections went silent',
    );
    expect([...new Set(c.ids())]).toEqual([1n, 2n, 3n, 4n]);
    // The replaced pools are cut at close, not waited for (the admin's would wait 30 s here).
    const closing = performance.now();
    await app.close();
    expect(performance.now() - closing).toBeLessThan(10_000);
  });

  test('ops.requestTimeoutMs must be longer than ops.lockTimeoutMs (a busy row is a 409, not a 503)', async () => {
    await expect(
      boot({ auth: bearerAuth(TOKEN, 'alice'), lockTimeoutMs: 1_000, requestTimeoutMs: 1_000 }),
    ).rejects.toMatchObject({ code: 'SLUICE_INVALID_OPTION', option: 'ops.requestTimeoutMs' });
  });

  test('operator actions run on connections of their own (sluice-admin), not on the application pool, and never take the last of them from /health', async () => {
    const { app, schema } = await build([recordingConsumer('mailer').consumer], {
      auth: bearerAuth(TOKEN, 'alice'),
      lockTimeoutMs: 20_000,
    });
    // A transaction of the test holds the consumer's row: the action waits for it, visibly.
    let held: () => void = () => undefined;
    const locked = new Promise<void>((resolve) => {
      held = resolve;
    });
    let release: () => void = () => undefined;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    const holding = db.sql.begin(async (tx) => {
      await tx`select 1 from ${tx(`${schema}.consumers`)} where name = 'mailer' for update`;
      held();
      await released;
    });
    await locked;
    // More writes than the admin pool has connections: they queue, and /health still answers.
    let settled = 0;
    const disabling = Array.from({ length: 6 }, () =>
      app
        .inject({ method: 'POST', url: '/sluice/consumers/mailer/disable', headers: auth, payload: {} })
        .finally(() => {
          settled += 1;
        }),
    );
    const waiting = async () =>
      db.sql<{ application_name: string }[]>`
        select application_name from pg_stat_activity
        where datname = current_database() and wait_event_type = 'Lock' and query like '%for update%'`;
    const deadline = performance.now() + 15_000;
    let waiters = await waiting();
    while (waiters.length < 2 && performance.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 10));
      waiters = await waiting();
    }
    expect(waiters.map((w) => w.application_name)).toEqual(['sluice-admin', 'sluice-admin']);
    const health = await authed(app, 'GET', '/sluice/health');
    expect(health.statusCode, health.body).toBe(200);
    expect(settled).toBe(0); // answered while every write still waited for the row
    release();
    await holding;
    for (const response of await Promise.all(disabling)) expect(response.statusCode, response.body).toBe(200);
    expect((await stateOf(schema)).map((r) => String(r['status']))).toEqual(['disabled']);
  });
});

test('a write whose client went away while it waited for a slot is not carried out', async () => {
  let handled = 0;
  let sent = 0;
  const { app, schema } = await build(
    [recordingConsumer('mailer').consumer],
    { auth: bearerAuth(TOKEN, 'alice'), lockTimeoutMs: 20_000 },
    {
      before: (host) => {
        host.addHook('preHandler', (_request, _reply, done) => {
          handled += 1;
          done();
        });
        host.addHook('onSend', (_request, _reply, payload, done) => {
          sent += 1;
          done(null, payload);
        });
      },
    },
  );
  await app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.server.address() as AddressInfo;
  const holding = gate();
  let locked = false;
  const holder = db.sql.begin(async (tx) => {
    await tx`select 1 from ${tx(`${schema}.consumers`)} where name = 'mailer' for update`;
    locked = true;
    await holding.promise;
  });
  await until(() => locked, 10_000, 'the row to be held');
  const disable = () =>
    fetch(`http://127.0.0.1:${port}/sluice/consumers/mailer/disable`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: '{}',
    });
  // Two writes take both slots and wait for the row; a third and a fourth wait for a slot, and the
  // fourth's client goes.
  const first = [disable(), disable()];
  await until(() => handled === 2, 10_000, 'two writes in their handlers');
  const gone = new AbortController();
  const third = disable();
  void third.catch(() => undefined);
  const leaving = fetch(`http://127.0.0.1:${port}/sluice/consumers/mailer/disable`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json' },
    body: '{}',
    signal: gone.signal,
  }).catch(() => undefined);
  await until(() => handled === 4, 10_000, 'the third and fourth writes to wait for a slot');
  gone.abort();
  await leaving;
  holding.open();
  await holder;
  for (const response of await Promise.all([...first, third])) expect(response.status).toBe(200);
  await until(() => sent === 4, 10_000, 'every write to be answered');
  const [audits] = await db.sql<{ n: number }[]>`
    select count(*)::int as n from ${db.sql(`${schema}.audit`)} where action = 'disable'`;
  expect(audits?.n).toBe(3); // the fourth, whose client left, did nothing
});

describe('ops routes', () => {
  test('every route answers 401 without (or with wrong) credentials, and nothing changes', async () => {
    const { app, schema, routes } = await build([
      failingOn('mailer', (e) => e.id === 2n, { errorPolicy: { maxAttempts: 1 } }).consumer,
    ]);
    await deadMailer(app, schema);
    const before = await stateOf(schema);
    // The dashboard's page shell holds no data and, with a bearer token, loads without it (it asks
    // for the token): dashboard.db.test.ts. Every other route wants the token.
    const opsRoutes = routes.filter((r) => r.url.startsWith('/sluice') && !r.shell);
    expect(opsRoutes.length).toBeGreaterThanOrEqual(13);
    expect(routes.filter((r) => r.shell).length).toBeGreaterThanOrEqual(4);
    for (const route of opsRoutes) {
      const url = route.url
        .replace(':name', 'mailer')
        .replace(/:(eventId|id)\b/, '2')
        .replace(':version', '1');
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
    const diagnose = await authed(app, 'GET', '/sluice/consumers/mailer/diagnose');
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
    const wrong = await authed(app, 'POST', '/sluice/consumers/mailer/skip', { eventId: '3' });
    expect(wrong.statusCode).toBe(409);
    expect(wrong.json()).toMatchObject({ code: 'SLUICE_SKIP_MISMATCH' });
    expect(await stateOf(schema)).toEqual(before);
    const right = await authed(app, 'POST', '/sluice/consumers/mailer/skip', { eventId: '2' });
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
    const response = await authed(app, 'POST', '/sluice/consumers/feed/disable', {});
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
    const disabled = await authed(app, 'POST', `/sluice/consumers/${encodeURIComponent(odd)}/disable`, {});
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
    ['a limit with an exponent', 'GET', '/sluice/audit?limit=1e2', undefined],
    ['a limit in hexadecimal', 'GET', '/sluice/consumers/mailer/dead-letters?limit=0x10', undefined],
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
    ['a parked-key replay without a key', 'POST', '/sluice/consumers/mailer/parked-keys/replay', {}],
    [
      'a parked-key drop with a key that is not text',
      'POST',
      '/sluice/consumers/mailer/parked-keys/drop',
      { key: {} },
    ],
    [
      'a parked key over 1000 characters',
      'POST',
      '/sluice/consumers/mailer/parked-keys/replay',
      { key: 'k'.repeat(1001) },
    ],
    [
      'a parked key over 1000 bytes',
      'POST',
      '/sluice/consumers/mailer/parked-keys/drop',
      { key: '\u00e9'.repeat(501) },
    ],
    ['a NUL in a parked key', 'POST', '/sluice/consumers/mailer/parked-keys/replay', { key: 'a\u0000b' }],
    ['parked events without a key', 'GET', '/sluice/consumers/mailer/parked-keys/events', undefined],
    [
      'parked events with a limit over 1000',
      'GET',
      '/sluice/consumers/mailer/parked-keys/events?key=s-1&limit=1001',
      undefined,
    ],
    ['parked keys with a limit of zero', 'GET', '/sluice/consumers/mailer/parked-keys?limit=0', undefined],
    ['a lane change without a count', 'POST', '/sluice/consumers/mailer/lanes', {}],
    ['a NUL in the name of a lane change', 'POST', '/sluice/consumers/a%00b/lanes', { lanes: 2 }],
    [
      'a name over 200 bytes in a lane change',
      'POST',
      `/sluice/consumers/${encodeURIComponent('\u00e9'.repeat(101))}/lanes`,
      { lanes: 2 },
    ],
    ['a lane count of zero', 'POST', '/sluice/consumers/mailer/lanes', { lanes: 0 }],
    ['a lane count over 1024', 'POST', '/sluice/consumers/mailer/lanes', { lanes: 1025 }],
    ['a lane count that is not whole', 'POST', '/sluice/consumers/mailer/lanes', { lanes: 2.5 }],
    ['a lane count that is text', 'POST', '/sluice/consumers/mailer/lanes', { lanes: 'four' }],
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

  test('a refused body says what is wrong with it: a leap second, a __proto__ key', async () => {
    const { app, schema } = await build([recordingConsumer('mailer').consumer]);
    const before = await stateOf(schema);
    for (const until of ['2096-12-31T23:59:60Z', '2096-12-31 23:59:60Z', '2097-01-01T00:59:60+01:00']) {
      const leap = await authed(app, 'POST', '/sluice/consumers/mailer/disable', { until });
      expect(leap.statusCode, leap.body).toBe(400);
      expect(leap.json(), until).toMatchObject({
        code: 'SLUICE_INVALID_OPTION',
        message: expect.stringContaining('leap second') as unknown,
      });
    }
    for (const payload of [
      '{"eventId": "2", "__proto__": {"admin": true}}',
      '\ufeff{"eventId": "2", "__proto__": {"admin": true}}',
      '{"eventId": "2", "constructor": {"prototype": {"admin": true}}}',
    ]) {
      const proto = await app.inject({
        method: 'POST',
        url: '/sluice/consumers/mailer/skip',
        headers: { ...auth, 'content-type': 'application/json' },
        payload,
      });
      expect(proto.statusCode, proto.body).toBe(400);
      expect(proto.json(), payload).toMatchObject({
        code: 'SLUICE_INVALID_REQUEST',
        message: expect.stringContaining('__proto__') as unknown,
      });
    }
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
      'lanes',
      'parked-keys/drop',
      'parked-keys/replay',
      'rebuild/abandon',
      'rebuild/approve',
      'rebuild/pause',
      'rebuild/resume',
      'restart',
      'skip',
      'versions/:version/drop',
    ]);
    expect(writes.every((r) => r.write)).toBe(true);
    for (const route of writes) {
      const response = await authed(
        app,
        'POST',
        route.url.replace(':name', 'feed').replace(':version', '1'),
        {
          from: '0',
          eventId: '1',
          key: 's-1',
          lanes: 4,
        },
      );
      expect(response.statusCode, route.url).toBe(405);
      expect(response.json<{ code: string }>().code, route.url).toBe('SLUICE_READ_ONLY');
      // Whatever the body: it is not even read (an empty JSON body was a 400 from the parser).
      for (const body of ['', '{"eventId":']) {
        const raw = await app.inject({
          method: 'POST',
          url: `/sluice/consumers/feed/${route.url.replace('/sluice/consumers/:name/', '').replace(':version', '1')}`,
          headers: { ...auth, 'content-type': 'application/json' },
          payload: body,
        });
        expect([raw.statusCode, raw.json<{ code: string }>().code], `${route.url} ${body}`).toEqual([
          405,
          'SLUICE_READ_ONLY',
        ]);
      }
    }
    expect((await app.inject({ method: 'GET', url: '/sluice/consumers', headers: auth })).statusCode).toBe(
      200,
    );
    expect(await auditCount(schema)).toBe(0);
  });

  test('an unexpected failure is a 500 with SLUICE_INTERNAL and no detail', async () => {
    const { app, schema } = await build([recordingConsumer('feed').consumer]);
    // Something the ops routes do not expect: a column of the audit table renamed under them.
    await db.sql`alter table ${db.sql(`${schema}.audit`)} rename column actor to renamed_actor`;
    const response = await authed(app, 'GET', '/sluice/audit');
    expect(response.statusCode).toBe(500);
    const body = response.json<{ code: string; message: string }>();
    expect(body).toMatchObject({ code: 'SLUICE_INTERNAL', message: 'Internal error; see the server log' });
    expect(response.body).not.toContain('actor'); // no SQL or column name reaches the client
  });

  test('a prepared statement lost behind a transaction pooler is a 503 that says what to set, and changes nothing', async () => {
    const { app, schema } = await build([
      failingOn('mailer', (e) => e.id === 2n, { errorPolicy: { maxAttempts: 1 } }).consumer,
    ]);
    await deadMailer(app, schema);
    const before = await stateOf(schema);
    // What a transaction pooler's next server connection answers a statement prepared on another one.
    await db.sql.unsafe(`
      create function ${schema}.lost_statement() returns trigger language plpgsql as $$
      begin raise exception 'prepared statement "s1" does not exist' using errcode = '26000'; end $$;
      create trigger lost_statement before insert on ${schema}.audit
      for each row execute function ${schema}.lost_statement()`);
    const response = await authed(app, 'POST', '/sluice/consumers/mailer/skip', { eventId: '2' });
    expect(response.statusCode).toBe(503);
    const body = response.json<{ code: string; message: string }>();
    expect(body.code).toBe('SLUICE_DATABASE_UNAVAILABLE');
    expect(body.message).toContain('create the pool with prepare: false');
    expect(await stateOf(schema)).toEqual(before);
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
    const response = await authed(app, 'GET', '/sluice/consumers/mailer/dead-letters');
    expect(response.json()).toEqual([
      expect.objectContaining({ eventId: '1', data: { n: '[redacted]' }, metadata: {} }),
    ]);
  });

  test('one event and one dead letter open by id, redacted as the list is; unknown ids 404, bad ids 400', async () => {
    const seen: string[] = [];
    const c = failingOn('mailer', (e) => e.id === 2n, { errorPolicy: { maxAttempts: 1 } });
    const { app, schema } = await build([c.consumer, recordingConsumer('other').consumer], {
      auth: bearerAuth(TOKEN),
      redact: ({ type, streamId, data, metadata }) => {
        seen.push(`${type} ${streamId}`);
        return { data: { ...data, email: '[redacted]' }, metadata: { kept: Object.keys(metadata) } };
      },
    });
    await appendEvents(
      db.sql,
      3,
      (n) => ({
        streamId: `customer-${n}`,
        type: 'SignedUp',
        data: { n, email: `person${n}@example.com` },
        metadata: { ip: '203.0.113.7' },
      }),
      schema,
    );
    await app.sluice.dispatcher.runOnce();
    const get = (url: string) => app.inject({ method: 'GET', url: `/sluice${url}`, headers: auth });

    // The event mailer is stuck on (it died on event 2).
    const event = await get('/consumers/mailer/events/2');
    expect(event.statusCode).toBe(200);
    const { createdAt } = event.json<{ createdAt: string }>();
    expect(createdAt).toMatch(/^\d{4}-\d\d-\d\dT/);
    expect(event.json()).toEqual({
      consumer: 'mailer',
      instanceId: '*',
      id: '2',
      streamId: 'customer-1',
      type: 'SignedUp',
      data: { n: 1, email: '[redacted]' },
      metadata: { kept: ['ip'] },
      createdAt,
      stuck: true,
    });
    expect(event.body).not.toContain('person1@example.com');
    expect(event.body).not.toContain('203.0.113.7');
    expect((await get('/consumers/other/events/2')).json()).toMatchObject({ id: '2', stuck: false });
    expect(seen).toEqual(['SignedUp customer-1', 'SignedUp customer-1']);

    // Skipped: its dead letter, by the id the list gives.
    const skip = await authed(app, 'POST', '/sluice/consumers/mailer/skip', { eventId: '2' });
    expect(skip.statusCode).toBe(200);
    const [listed] = (await get('/consumers/mailer/dead-letters')).json<{ id: string }[]>();
    const letter = await get(`/consumers/mailer/dead-letters/${listed?.id}`);
    expect(letter.statusCode).toBe(200);
    expect(letter.json()).toEqual(listed);
    expect(letter.json()).toMatchObject({
      eventId: '2',
      streamId: 'customer-1',
      reason: 'operator-skip',
      error: 'poison event 2',
      data: { n: 1, email: '[redacted]' },
      metadata: { kept: ['ip'] },
    });
    expect(letter.body).not.toContain('person1@example.com');

    const errors: [string, number, string][] = [
      ['/consumers/mailer/events/99', 404, 'SLUICE_EVENT_NOT_FOUND'],
      ['/consumers/nobody/events/1', 404, 'SLUICE_CONSUMER_NOT_FOUND'],
      [`/consumers/other/dead-letters/${listed?.id}`, 404, 'SLUICE_DEAD_LETTER_NOT_FOUND'],
      ['/consumers/mailer/dead-letters/99', 404, 'SLUICE_DEAD_LETTER_NOT_FOUND'],
      ['/consumers/mailer/events/0', 400, 'SLUICE_INVALID_REQUEST'],
      ['/consumers/mailer/events/-1', 400, 'SLUICE_INVALID_REQUEST'],
      ['/consumers/mailer/events/1e3', 400, 'SLUICE_INVALID_REQUEST'],
      ['/consumers/mailer/events/0x10', 400, 'SLUICE_INVALID_REQUEST'],
      ['/consumers/mailer/events/%201', 400, 'SLUICE_INVALID_REQUEST'],
      ['/consumers/mailer/events/99999999999999999999', 400, 'SLUICE_INVALID_REQUEST'],
      ['/consumers/mailer/events/9999999999999999999', 400, 'SLUICE_INVALID_OPTION'],
      ['/consumers/mailer/dead-letters/abc', 400, 'SLUICE_INVALID_REQUEST'],
      ['/consumers/mailer/events/2?instance=', 400, 'SLUICE_INVALID_REQUEST'],
    ];
    for (const [url, status, code] of errors) {
      const response = await get(url);
      expect([response.statusCode, response.json<{ code: string }>().code], url).toEqual([status, code]);
    }
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

  test("unknown fields and values of another JSON type are 400 whatever the host's Ajv would mend; nothing changes", async () => {
    // Fastify's default Ajv removes unknown fields and coerces types: a misspelt forMs would have
    // disabled the consumer with no end, "true" would have been a dry run's true.
    const { app, schema } = await build([failingOn('mailer', () => false).consumer]);
    await appendEvents(db.sql, 3, undefined, schema);
    await drainUntilIdle(app.sluice.dispatcher);
    const before = await stateOf(schema);
    const audits = await auditCount(schema);
    const cases: [url: string, payload: object, message: RegExp][] = [
      [
        'disable',
        { forMS: 5_000 },
        /body\.forMS is not a field of this request \(its fields: until, forMs, instanceId, reason\)/,
      ],
      ['disable', { forMs: '5000' }, /body\.forMs must be an integer, not a string/],
      ['disable', { forMs: 5_000.5 }, /body\.forMs must be an integer, not a number/],
      ['restart', { from: 3 }, /body\.from must be a string, not an integer/],
      ['restart', { from: 'now', reason: null }, /body\.reason must be a string, not null/],
      ['dead-letters/replay', { dryRun: 'true' }, /body\.dryRun must be a boolean, not a string/],
      ['dead-letters/replay', { ids: '5' }, /body\.ids must be an array, not a string/],
      ['dead-letters/replay', { ids: ['4', 5] }, /body\.ids\[1\] must be a string, not an integer/],
      ['skip', { eventId: 2 }, /body\.eventId must be a string, not an integer/],
      ['enable', { instance: 'a' }, /body\.instance is not a field/],
      // Names an object has by inheritance are unknown fields too.
      ['enable', { toString: 1 }, /body\.toString is not a field/],
      ['enable', { constructor: 1 }, /body\.constructor is not a field/],
    ];
    for (const [url, payload, message] of cases) {
      const response = await authed(app, 'POST', `/sluice/consumers/mailer/${url}`, payload);
      expect(response.statusCode, `${url} ${JSON.stringify(payload)}: ${response.body}`).toBe(400);
      const answer = response.json<{ code: string; message: string }>();
      expect(answer.code).toBe('SLUICE_INVALID_REQUEST');
      expect(answer.message).toMatch(message);
    }
    const query = await authed(app, 'GET', '/sluice/consumers/mailer?instanceId=x');
    expect(query.statusCode, query.body).toBe(400);
    expect(query.json<{ message: string }>().message).toMatch(
      /query\.instanceId is not a query parameter of this request \(its query parameters: instance\)/,
    );
    // A percent-escape that is not UTF-8 is refused, not taken for the text as written.
    const escaped = await authed(app, 'GET', '/sluice/consumers/mailer/parked-keys/events?key=%ff');
    expect(escaped.statusCode, escaped.body).toBe(400);
    expect(escaped.json<{ message: string }>().message).toMatch(/malformed percent-escape \(%ff\)/);
    for (const parameter of ['x', 'toString', 'hasOwnProperty', '__proto__']) {
      const healthQuery = await authed(app, 'GET', `/sluice/health?${parameter}=1`);
      expect(healthQuery.statusCode, `${parameter}: ${healthQuery.body}`).toBe(400);
    }
    // A method no route has is a 404, before the write checks (a body type it would refuse).
    const deleting = await app.inject({ method: 'DELETE', url: '/sluice/consumers/mailer', headers: auth });
    expect(deleting.statusCode, deleting.body).toBe(404);
    expect(deleting.json<{ code: string }>().code).toBe('SLUICE_ROUTE_NOT_FOUND');
    // The instance named twice, differently: refused, not one of them guessed.
    for (const url of ['disable', 'dead-letters/replay']) {
      const twice = await authed(app, 'POST', `/sluice/consumers/mailer/${url}?instance=a`, {
        instanceId: 'b',
      });
      expect(twice.statusCode, twice.body).toBe(400);
      expect(twice.json<{ code: string; option: string }>()).toMatchObject({
        code: 'SLUICE_INVALID_OPTION',
      });
    }
    // A write route without query parameters takes none (dropSource belongs in the body).
    const inQuery = await authed(app, 'POST', '/sluice/consumers/mailer/versions/1/drop?dropSource=true', {});
    expect(inQuery.statusCode, inQuery.body).toBe(400);
    expect(inQuery.json<{ message: string }>().message).toMatch(
      /query\.dropSource is not a query parameter of this request \(it takes no query parameter\)/,
    );
    expect(await stateOf(schema)).toEqual(before);
    expect(await auditCount(schema)).toBe(audits);
    // The same requests spelt right still go through.
    expect((await authed(app, 'GET', '/sluice/consumers/mailer?instance=*')).statusCode).toBe(200);
    expect(
      (await authed(app, 'POST', '/sluice/consumers/mailer/dead-letters/replay', { dryRun: true }))
        .statusCode,
    ).toBe(200);
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

  test('health answers 503 once the application stopped the dispatcher itself; migrate given as null migrates', async () => {
    const consumers = [recordingConsumer('mailer').consumer];
    const { app } = await pluginApp(
      db.sql,
      consumers,
      { auth: bearerAuth(TOKEN, 'alice') },
      {
        options: { migrate: null as unknown as boolean },
      },
    );
    const running = await app.inject({ method: 'GET', url: '/sluice/health', headers: auth });
    expect(running.json()).toMatchObject({ status: 'ok', running: true });
    expect(app.sluice.dispatcher.running).toBe(true);
    await app.sluice.dispatcher.stop();
    expect(app.sluice.dispatcher.running).toBe(false);
    const stopped = await app.inject({ method: 'GET', url: '/sluice/health', headers: auth });
    expect(stopped.statusCode).toBe(503);
    expect(stopped.json()).toMatchObject({ running: false });
  });

  test('health answers 503 once the database has not answered its read within HEALTH_READ_MS, and ok again after', async () => {
    const { app, schema } = await build([recordingConsumer('mailer').consumer]);
    // A lock no read of the consumers gets past: to /health, a database that does not answer.
    const holder = await heldTransaction(db.sql);
    await holder.sql`lock table ${holder.sql(`${schema}.consumers`)} in access exclusive mode`;
    const startedAt = performance.now();
    const stuck = await app.inject({ method: 'GET', url: '/sluice/health', headers: auth });
    const waitedMs = performance.now() - startedAt;
    expect(stuck.statusCode).toBe(503);
    expect(stuck.json()).toMatchObject({
      status: 'down',
      running: true,
      message: `the database did not answer within ${HEALTH_READ_MS} ms`,
    });
    expect(waitedMs).toBeGreaterThanOrEqual(HEALTH_READ_MS - 50);
    await holder.commit();
    const healthy = await app.inject({ method: 'GET', url: '/sluice/health', headers: auth });
    expect(healthy.json()).toMatchObject({ status: 'ok', running: true });
  });
});

test('while the database refuses the ops connections, reads and writes answer 503 SLUICE_DATABASE_UNAVAILABLE, not 500, and work again once it is back', async () => {
  const role = `ops_down_${randomBytes(4).toString('hex')}`;
  const password = randomBytes(12).toString('hex');
  await db.sql.unsafe(`create role "${role}" login superuser password '${password}'`);
  const sql = db.connect({ user: role, password, max: 4 });
  onTestFinished(async () => {
    await sql.end({ timeout: 1 });
    await db.sql.unsafe(`drop owned by "${role}"; drop role if exists "${role}"`).catch(() => undefined);
  });
  const { app } = await pluginApp(sql, [recordingConsumer('feed').consumer], {
    auth: bearerAuth(TOKEN, 'alice'),
  });
  expect((await authed(app, 'GET', '/sluice/consumers')).statusCode).toBe(200);
  // The role may no longer log in, and its sessions are gone: every new connection is refused.
  await db.sql.unsafe(`alter role "${role}" nologin`);
  await db.sql`select pg_terminate_backend(pid) from pg_stat_activity where usename = ${role}`;
  for (const [method, url] of [
    ['GET', '/sluice/consumers'],
    ['POST', '/sluice/consumers/feed/enable'],
  ] as const) {
    const answer = await authed(app, method, url, method === 'POST' ? {} : undefined);
    expect(answer.statusCode, `${method} ${url}: ${answer.body}`).toBe(503);
    expect(answer.json()).toMatchObject({
      code: 'SLUICE_DATABASE_UNAVAILABLE',
      error: 'Service Unavailable',
    });
  }
  await db.sql.unsafe(`alter role "${role}" login`);
  await until(
    async () => (await authed(app, 'GET', '/sluice/consumers')).statusCode === 200,
    10_000,
    'the ops routes to work again',
  );
});

describe('laned consumers, parked keys and lane changes', () => {
  const ISO_TIME: unknown = expect.stringMatching(/^\d{4}-\d\d-\d\dT/);
  const ONE_OF_THREE_LANES: unknown = expect.stringMatching(/^\*[0-2]\/3$/);
  /** Events keyed by stream: `s-0` … `s-5`, each with an address that the redaction hides. */
  const byStream = (n: number) => ({
    streamId: `s-${n % 6}`,
    type: 'Placed',
    data: { n, email: `person${n}@example.com` },
    metadata: { ip: '203.0.113.7' },
  });

  /** `reactor` as 3 lanes, parking the keys whose stream is in `broken`; drained once. */
  async function buildLaned(broken: Set<string>, ops: Partial<OpsOptions> = {}) {
    const delivered: string[] = [];
    const reactor: Consumer = {
      name: 'reactor',
      lanes: 3,
      errorPolicy: { maxAttempts: 1, parkKey: true },
      handler: (event) => {
        if (broken.has(event.streamId)) throw new Error(`cannot handle ${event.streamId}`);
        delivered.push(`${event.streamId}:${event.id}`);
      },
    };
    const built = await build([reactor, recordingConsumer('feed').consumer], {
      auth: bearerAuth(TOKEN, 'alice'),
      ...ops,
    });
    await appendEvents(db.sql, 24, byStream, built.schema);
    await drainUntilIdle(built.app.sluice.dispatcher);
    return { ...built, delivered };
  }

  async function parkedState(schema: string) {
    const table = (name: string) => db.sql(`${schema}.${name}`);
    return {
      consumers: await stateOf(schema),
      keys: await db.sql`select * from ${table('parked_keys')} order by 1, 2`,
      events: await db.sql`select * from ${table('parked_events')} order by 1, 2, 3`,
      laneChanges: await db.sql`select * from ${table('lane_changes')} order by 1`,
      audit: await auditCount(schema),
    };
  }

  const get = (app: FastifyInstance, url: string) =>
    authed(app, 'GET', url === '' ? '/sluice/consumers' : `/sluice/consumers/${url}`);
  const post = (app: FastifyInstance, url: string, payload: object) =>
    authed(app, 'POST', `/sluice/consumers/${url}`, payload);

  test('a laned consumer: rows per lane, summed up by show and diagnose, actions on every lane', async () => {
    const { app } = await buildLaned(new Set(['s-1']));
    const list = (await get(app, '')).json<Record<string, unknown>[]>();
    const lanes = list.filter((c) => c['name'] === 'reactor');
    expect(lanes.map((c) => [c['instanceId'], c['lane'], c['parkedKeys'], c['laneChange']])).toEqual([
      ['*0/3', { index: 0, count: 3 }, 1, null],
      ['*1/3', { index: 1, count: 3 }, 1, null],
      ['*2/3', { index: 2, count: 3 }, 1, null],
    ]);
    expect(list.find((c) => c['name'] === 'feed')).toMatchObject({
      instanceId: '*',
      lane: { index: 0, count: 1 },
      parkedKeys: 0,
      laneChange: null,
    });

    const shown = await get(app, 'reactor');
    expect(shown.statusCode, shown.body).toBe(200);
    expect(shown.json()).toMatchObject({ instanceId: '*', lane: null, parkedKeys: 1, cursor: '24' });
    expect(shown.json<{ lanes: { instanceId: string; lane: unknown }[] }>().lanes).toEqual([
      expect.objectContaining({ instanceId: '*0/3', lane: { index: 0, count: 3 }, cursor: '24' }),
      expect.objectContaining({ instanceId: '*1/3', lane: { index: 1, count: 3 } }),
      expect.objectContaining({ instanceId: '*2/3', lane: { index: 2, count: 3 } }),
    ]);
    const one = (await get(app, `reactor?instance=${encodeURIComponent('*1/3')}`)).json<object>();
    expect(one).toMatchObject({ instanceId: '*1/3', lane: { index: 1, count: 3 } });
    expect(one).not.toHaveProperty('lanes');

    const diagnosis = (await get(app, 'reactor/diagnose')).json<{
      findings: string[];
      consumer: { lanes: unknown[] };
      lanes: { consumer: { instanceId: string }; findings: string[] }[];
    }>();
    expect(diagnosis.findings[0]).toMatch(/^1 parked key\(s\)/);
    expect(diagnosis.consumer.lanes).toHaveLength(3);
    expect(diagnosis.lanes.map((l) => l.consumer.instanceId)).toEqual(['*0/3', '*1/3', '*2/3']);

    const disabled = await post(app, 'reactor/disable', { reason: 'maintenance' });
    expect(disabled.statusCode, disabled.body).toBe(200);
    expect(disabled.json()).toMatchObject({ instanceId: '*', action: 'disable', statusAfter: 'disabled' });
    expect(
      disabled.json<{ lanes: { instanceId: string; statusAfter: string; cursorAfter: string }[] }>().lanes,
    ).toEqual([
      expect.objectContaining({ instanceId: '*0/3', statusAfter: 'disabled', cursorAfter: '24' }),
      expect.objectContaining({ instanceId: '*1/3', statusAfter: 'disabled', cursorAfter: '24' }),
      expect.objectContaining({ instanceId: '*2/3', statusAfter: 'disabled', cursorAfter: '24' }),
    ]);
    const enabled = await post(app, 'reactor/enable', { instanceId: '*2/3' });
    expect(enabled.json()).toMatchObject({ instanceId: '*2/3', statusAfter: 'idle' });
    expect(enabled.json()).not.toHaveProperty('lanes');
  });

  test('parked keys: listed, their events redacted, replayed once fixed, dropped; audited with the actor', async () => {
    const broken = new Set(['s-1', 's-2']);
    const seen: string[] = [];
    const { app, schema, delivered } = await buildLaned(broken, {
      redact: ({ type, streamId, data, metadata }) => {
        seen.push(`${type} ${streamId}`);
        return { data: { ...data, email: '[redacted]' }, metadata: { kept: Object.keys(metadata) } };
      },
    });

    const keys = await get(app, 'reactor/parked-keys');
    expect(keys.statusCode, keys.body).toBe(200);
    const listed = keys.json<Record<string, unknown>[]>();
    expect(listed.map((k) => [k['key'], k['firstEventId'], k['events'], k['attempts'], k['error']])).toEqual([
      ['s-1', '2', 4, 1, 'cannot handle s-1'],
      ['s-2', '3', 4, 1, 'cannot handle s-2'],
    ]);
    expect(listed[0]).toMatchObject({ replayRequestedAt: null, parkedAt: ISO_TIME });
    expect((await get(app, 'reactor/parked-keys?limit=1')).json()).toHaveLength(1);
    expect((await get(app, 'feed/parked-keys')).json()).toEqual([]);

    const events = await get(app, 'reactor/parked-keys/events?key=s-1');
    expect(events.statusCode, events.body).toBe(200);
    const parked = events.json<Record<string, unknown>[]>();
    expect(parked.map((e) => [e['eventId'], e['error']])).toEqual([
      ['2', 'cannot handle s-1'],
      ['8', null],
      ['14', null],
      ['20', null],
    ]);
    expect(parked[0]).toMatchObject({
      key: 's-1',
      streamId: 's-1',
      type: 'Placed',
      data: { n: 1, email: '[redacted]' },
      metadata: { kept: ['ip'] },
      eventCreatedAt: ISO_TIME,
      parkedAt: ISO_TIME,
    });
    expect(events.body).not.toContain('@example.com');
    expect(events.body).not.toContain('203.0.113.7');
    expect(seen).toEqual(Array(4).fill('Placed s-1'));
    expect((await get(app, 'reactor/parked-keys/events?key=s-1&limit=2')).json()).toHaveLength(2);

    broken.delete('s-1');
    const replay = await post(app, 'reactor/parked-keys/replay', {
      key: 's-1',
      reason: 'fixed the template',
    });
    expect(replay.statusCode, replay.body).toBe(200);
    expect(replay.json()).toEqual({
      consumer: 'reactor',
      key: 's-1',
      action: 'replay-parked-key',
      events: 4,
      lane: ONE_OF_THREE_LANES,
    });
    expect((await get(app, 'reactor/parked-keys')).json()).toEqual([
      expect.objectContaining({ key: 's-1', replayRequestedAt: ISO_TIME }),
      expect.objectContaining({ key: 's-2', replayRequestedAt: null }),
    ]);
    await drainUntilIdle(app.sluice.dispatcher);
    expect(delivered.filter((d) => d.startsWith('s-1:'))).toEqual(['s-1:2', 's-1:8', 's-1:14', 's-1:20']);
    expect((await get(app, 'reactor/parked-keys')).json()).toEqual([expect.objectContaining({ key: 's-2' })]);

    const dropped = await post(app, 'reactor/parked-keys/drop', { key: 's-2' });
    expect(dropped.statusCode, dropped.body).toBe(200);
    expect(dropped.json()).toMatchObject({ key: 's-2', action: 'drop-parked-key', events: 4 });
    expect((await get(app, 'reactor/parked-keys')).json()).toEqual([]);
    expect((await get(app, '')).json<{ parkedKeys: number }[]>().map((c) => c.parkedKeys)).toEqual([
      0, 0, 0, 0,
    ]);

    const audit = (await authed(app, 'GET', '/sluice/audit?consumer=reactor')).json<
      { action: string; actor: string; details: Record<string, unknown> }[]
    >();
    expect(audit.map((a) => [a.action, a.actor])).toEqual([
      ['drop-parked-key', 'alice'],
      ['replay-parked-key', 'alice'],
    ]);
    expect(audit[1]?.details).toMatchObject({ key: 's-1', events: 4, reason: 'fixed the template' });

    // Gone keys, unknown keys and unknown consumers: 404, nothing changed.
    const before = await parkedState(schema);
    const missing: [string, string, object | undefined, string][] = [
      ['POST', 'reactor/parked-keys/replay', { key: 's-2' }, 'SLUICE_KEY_NOT_PARKED'],
      ['POST', 'reactor/parked-keys/drop', { key: 's-1' }, 'SLUICE_KEY_NOT_PARKED'],
      ['POST', 'reactor/parked-keys/drop', { key: '' }, 'SLUICE_KEY_NOT_PARKED'],
      ['GET', 'reactor/parked-keys/events?key=nope', undefined, 'SLUICE_KEY_NOT_PARKED'],
      [
        'GET',
        `reactor/parked-keys/events?key=${encodeURIComponent('a/b?c')}`,
        undefined,
        'SLUICE_KEY_NOT_PARKED',
      ],
      ['GET', 'nobody/parked-keys', undefined, 'SLUICE_CONSUMER_NOT_FOUND'],
      ['GET', 'nobody/parked-keys/events?key=s-1', undefined, 'SLUICE_CONSUMER_NOT_FOUND'],
      ['POST', 'nobody/parked-keys/replay', { key: 's-1' }, 'SLUICE_CONSUMER_NOT_FOUND'],
      ['POST', 'nobody/parked-keys/drop', { key: 's-1' }, 'SLUICE_CONSUMER_NOT_FOUND'],
      ['POST', 'nobody/lanes', { lanes: 2 }, 'SLUICE_CONSUMER_NOT_FOUND'],
    ];
    for (const [method, url, payload, code] of missing) {
      const response = method === 'GET' ? await get(app, url) : await post(app, url, payload ?? {});
      expect([response.statusCode, response.json<{ code: string }>().code], `${method} ${url}`).toEqual([
        404,
        code,
      ]);
    }
    expect(await parkedState(schema)).toEqual(before);
  });

  test('a key with any characters travels in the query and the body', async () => {
    const key = 'tenant/42 ?#&=%é';
    const broken = new Set([key]);
    const { app } = await buildLaned(broken);
    await appendEvents(db.sql, 2, () => ({ streamId: key, type: 'Placed', data: {} }), app.sluice.schema);
    await drainUntilIdle(app.sluice.dispatcher);
    expect((await get(app, 'reactor/parked-keys')).json<{ key: string }[]>().map((k) => k.key)).toEqual([
      key,
    ]);
    const events = await get(app, `reactor/parked-keys/events?key=${encodeURIComponent(key)}`);
    expect(events.json<{ eventId: string }[]>().map((e) => e.eventId)).toEqual(['25', '26']);
    broken.clear();
    expect((await post(app, 'reactor/parked-keys/replay', { key })).json()).toMatchObject({ key, events: 2 });
    await drainUntilIdle(app.sluice.dispatcher);
    expect((await get(app, 'reactor/parked-keys')).json()).toEqual([]);
  });

  test('a lane change: asked for, shown on every lane with its barrier, retargeted, refused while one drains', async () => {
    const { app, schema } = await buildLaned(new Set());
    const gap = await holdGap(db.sql, undefined, { schema });
    await appendEvents(db.sql, 3, byStream, schema);
    await app.sluice.dispatcher.runOnce();

    const asked = await post(app, 'reactor/lanes', { lanes: 5, reason: 'more throughput' });
    expect(asked.statusCode, asked.body).toBe(200);
    expect(asked.json()).toEqual({ consumer: 'reactor', from: 3, to: 5, outcome: 'started', barrier: '28' });
    const retargeted = await post(app, 'reactor/lanes', { lanes: 4 });
    expect(retargeted.json()).toEqual({
      consumer: 'reactor',
      from: 3,
      to: 4,
      outcome: 'retargeted',
      barrier: '28',
    });
    const rows = (await get(app, '')).json<{ name: string; laneChange: unknown }[]>();
    expect(rows.filter((c) => c.name === 'reactor').map((c) => c.laneChange)).toEqual(
      Array(3).fill({ from: 3, to: 4, barrier: '28', switched: false }),
    );
    expect(rows.find((c) => c.name === 'feed')?.laneChange).toBeNull();
    expect((await get(app, 'reactor')).json()).toMatchObject({
      laneChange: { from: 3, to: 4, barrier: '28', switched: false },
    });

    // Switched (every old lane is at the barrier); the old lanes still hold the gap: 409. (A pass
    // may not switch: an old lane's own turn can hold a row the switching lane skips.)
    await passUntil(
      app.sluice.dispatcher,
      async () =>
        (await db.sql`select 1 from ${db.sql(schema)}.lane_changes where switched_at is not null`).length > 0,
      'the change of lanes switched over',
    );
    const before = await parkedState(schema);
    const refused = await post(app, 'reactor/lanes', { lanes: 2 });
    expect(refused.statusCode, refused.body).toBe(409);
    expect(refused.json()).toMatchObject({ code: 'SLUICE_LANE_CHANGE_IN_PROGRESS' });
    expect(await parkedState(schema)).toEqual(before);

    await gap.release({ commit: false });
    await drainUntilIdle(app.sluice.dispatcher);
    const after = (await get(app, '')).json<{ name: string; instanceId: string; laneChange: unknown }[]>();
    expect(after.filter((c) => c.name === 'reactor').map((c) => [c.instanceId, c.laneChange])).toEqual([
      ['*0/4', null],
      ['*1/4', null],
      ['*2/4', null],
      ['*3/4', null],
    ]);
    expect((await post(app, 'reactor/lanes', { lanes: 4 })).json()).toMatchObject({ outcome: 'unchanged' });
    const audit = (await authed(app, 'GET', '/sluice/audit?consumer=reactor')).json<
      { action: string; actor: string; details: Record<string, unknown> }[]
    >();
    expect(audit.filter((a) => a.action === 'relane').map((a) => [a.actor, a.details['outcome']])).toEqual([
      ['alice', 'retargeted'],
      ['alice', 'started'],
    ]);
  });

  test('the new routes answer 401 without credentials, 405 when read-only, and change nothing', async () => {
    const requests: [method: 'GET' | 'POST', url: string, payload?: object][] = [
      ['GET', 'reactor/parked-keys'],
      ['GET', 'reactor/parked-keys/events?key=s-1'],
      ['POST', 'reactor/parked-keys/replay', { key: 's-1' }],
      ['POST', 'reactor/parked-keys/drop', { key: 's-1' }],
      ['POST', 'reactor/lanes', { lanes: 4 }],
    ];
    const { app, schema } = await buildLaned(new Set(['s-1']));
    const before = await parkedState(schema);
    for (const [method, url, payload] of requests) {
      for (const headers of [{}, { authorization: 'Bearer wrong-token-000000000' }]) {
        const response = await app.inject({
          method,
          url: `/sluice/consumers/${url}`,
          headers,
          ...(payload === undefined ? {} : { payload }),
        });
        expect(response.statusCode, `${method} ${url}`).toBe(401);
        expect(response.json()).toMatchObject({ code: 'SLUICE_UNAUTHORIZED' });
      }
    }
    expect(await parkedState(schema)).toEqual(before);

    const readOnly = await buildLaned(new Set(['s-1']), { readOnly: true });
    const readOnlyBefore = await parkedState(readOnly.schema);
    for (const [method, url, payload] of requests) {
      const response = await authed(readOnly.app, method, `/sluice/consumers/${url}`, payload);
      if (method === 'GET') expect(response.statusCode, url).toBe(200);
      else {
        expect(response.statusCode, url).toBe(405);
        expect(response.json()).toMatchObject({ code: 'SLUICE_READ_ONLY' });
      }
    }
    expect(await parkedState(readOnly.schema)).toEqual(readOnlyBefore);
  });
});

describe('versions and rebuilds', () => {
  const ISO_TIME: unknown = expect.stringMatching(/^\d{4}-\d\d-\d\dT/);

  /** `stats` at `version`: records `v<version>:<event id>` for every event it handles. */
  function stats(version: number, seen: string[]): Consumer {
    return {
      name: 'stats',
      version,
      handler: (event, ctx) => {
        seen.push(`v${ctx.version ?? '?'}:${event.id}`);
      },
    };
  }

  /** `stats` declared at versions 1 (live) and 2 (rebuilding from the beginning), and `feed`. */
  async function buildVersioned(ops: Partial<OpsOptions> = {}) {
    const seen: string[] = [];
    const built = await build([stats(1, seen), stats(2, seen), recordingConsumer('feed').consumer], {
      auth: bearerAuth(TOKEN, 'alice'),
      ...ops,
    });
    const handled = (version: number) =>
      seen.filter((s) => s.startsWith(`v${version}:`)).map((s) => Number(s.slice(s.indexOf(':') + 1)));
    return { ...built, handled };
  }

  async function versionState(schema: string) {
    const table = (name: string) => db.sql(`${schema}.${name}`);
    return {
      consumers: await stateOf(schema),
      versions:
        await db.sql`select consumer_name, version, state, barrier::text, changed_by from ${table('consumer_versions')} order by 1, 2`,
      audit: await auditCount(schema),
    };
  }

  const get = (app: FastifyInstance, url: string) => authed(app, 'GET', `/sluice/${url}`);
  const post = (app: FastifyInstance, url: string, payload: object = {}) =>
    authed(app, 'POST', `/sluice/consumers/${url}`, payload);
  /** The rebuild of `stats` as GET /consumers/stats/rebuild shows it. */
  const rebuildOf = async (app: FastifyInstance) =>
    (await get(app, 'consumers/stats/rebuild')).json<{ rebuild: Record<string, unknown> | null }[]>()[0]
      ?.rebuild;
  const expectRefused = async (
    request: ReturnType<typeof post>,
    status: number,
    code: string,
    label: string,
  ) => {
    const response = await request;
    expect(
      [response.statusCode, response.json<{ code: string }>().code],
      `${label}: ${response.body}`,
    ).toEqual([status, code]);
  };

  test('lists each versioned consumer with its versions and progress; pause, resume, approve once caught up, drop the retired version', async () => {
    const { app, schema, handled } = await buildVersioned();
    // Paused first: its rows wait while version 1 goes on (an append wakes the plugin's dispatcher).
    const paused = await post(app, 'stats/rebuild/pause', { reason: 'night batch first' });
    expect(paused.statusCode, paused.body).toBe(200);
    expect(paused.json()).toEqual({ consumer: 'stats', version: 2, state: 'paused', barrier: null });
    await appendEvents(db.sql, 30, undefined, schema);

    const list = await get(app, 'rebuilds');
    expect(list.statusCode, list.body).toBe(200);
    const [status, ...others] =
      list.json<
        { consumer: string; versions: Record<string, unknown>[]; rebuild: Record<string, unknown> | null }[]
      >();
    expect(others).toEqual([]); // feed declares no version
    expect(status?.consumer).toBe('stats');
    expect(status?.versions.map((v) => [v['version'], v['state'], v['rowName'], v['startPosition']])).toEqual(
      [
        [1, 'live', 'stats', '0'],
        [2, 'paused', 'stats@v2', '0'],
      ],
    );
    expect(status?.versions[1]).toMatchObject({ sideEffects: false, barrier: null, createdAt: ISO_TIME });
    expect(status?.rebuild).toMatchObject({
      consumer: 'stats',
      liveVersion: 1,
      version: 2,
      state: 'paused',
      sideEffects: false,
      position: '0',
      startPosition: '0',
      head: '30',
      lagEvents: '30',
      progress: 0,
      barrier: null,
      takeoverWithin: null,
      startedAt: ISO_TIME,
    });
    expect((await get(app, 'consumers/feed/rebuild')).json()).toEqual([]);

    await drainUntilIdle(app.sluice.dispatcher);
    expect(handled(1)).toHaveLength(30);
    expect(handled(2)).toEqual([]);
    expect(await rebuildOf(app)).toMatchObject({ state: 'paused', position: '0', lagEvents: '30' });

    // What the state does not allow: 409 SLUICE_REBUILD_STATE, nothing changed.
    const before = await versionState(schema);
    await expectRefused(post(app, 'stats/rebuild/approve'), 409, 'SLUICE_REBUILD_STATE', 'approve paused');
    await expectRefused(post(app, 'stats/rebuild/pause'), 409, 'SLUICE_REBUILD_STATE', 'pause paused');
    await expectRefused(
      post(app, 'stats/rebuild/pause', { version: 3 }),
      404,
      'SLUICE_REBUILD_NOT_FOUND',
      'pause another version',
    );
    expect(await versionState(schema)).toEqual(before);

    const resumed = await post(app, 'stats/rebuild/resume', { version: 2 });
    expect(resumed.json()).toEqual({ consumer: 'stats', version: 2, state: 'rebuilding', barrier: null });
    await expectRefused(post(app, 'stats/rebuild/resume'), 409, 'SLUICE_REBUILD_STATE', 'resume twice');
    await drainUntilIdle(app.sluice.dispatcher);
    expect(handled(2)).toEqual(handled(1));
    const caughtUp = await rebuildOf(app);
    expect(caughtUp).toMatchObject({
      state: 'rebuilding',
      position: '30',
      head: '30',
      lagEvents: '0',
      progress: 1,
    });
    expect(caughtUp?.['ratePerSecond']).toBeGreaterThan(0);

    // Approved at the head: version 1 stops at its cursor and version 2 is live in the same request.
    const approved = await post(app, 'stats/rebuild/approve', { version: 2 });
    expect(approved.statusCode, approved.body).toBe(200);
    expect(approved.json()).toEqual({ consumer: 'stats', version: 2, state: 'live', barrier: '30' });
    const after = (await get(app, 'rebuilds')).json<{ versions: { state: string }[]; rebuild: unknown }[]>();
    expect(after.map((s) => [s.versions.map((v) => v.state), s.rebuild])).toEqual([
      [['retired', 'live'], null],
    ]);
    await expectRefused(post(app, 'stats/rebuild/approve'), 404, 'SLUICE_REBUILD_NOT_FOUND', 'approve again');
    await expectRefused(post(app, 'stats/rebuild/abandon'), 404, 'SLUICE_REBUILD_NOT_FOUND', 'abandon live');
    await appendEvents(db.sql, 2, undefined, schema);
    await drainUntilIdle(app.sluice.dispatcher);
    expect(handled(2).slice(-2)).toEqual([31, 32]);
    expect(handled(1)).toHaveLength(30);

    // Only a retired version is dropped: its consumer rows go, the live version's stay.
    const refusedDrops: [string, number, string][] = [
      ['stats/versions/2/drop', 409, 'SLUICE_REBUILD_STATE'],
      ['stats/versions/3/drop', 404, 'SLUICE_REBUILD_NOT_FOUND'],
      ['feed/versions/1/drop', 404, 'SLUICE_REBUILD_NOT_FOUND'],
      ['nobody/versions/1/drop', 404, 'SLUICE_CONSUMER_NOT_FOUND'],
      ['nobody/rebuild/approve', 404, 'SLUICE_CONSUMER_NOT_FOUND'],
      ['feed/rebuild/pause', 404, 'SLUICE_REBUILD_NOT_FOUND'],
    ];
    const beforeDrops = await versionState(schema);
    for (const [url, status, code] of refusedDrops) await expectRefused(post(app, url), status, code, url);
    expect(await versionState(schema)).toEqual(beforeDrops);
    const dropped = await post(app, 'stats/versions/1/drop', { dropSource: false });
    expect(dropped.statusCode, dropped.body).toBe(200);
    expect(dropped.json()).toEqual({ consumer: 'stats', version: 1, rows: 1, dropped: null });
    expect((await stateOf(schema)).map((r) => String(r['name']))).toEqual(['feed', 'stats@v2']);
    await expectRefused(post(app, 'stats/versions/1/drop'), 409, 'SLUICE_REBUILD_STATE', 'drop twice');

    const audit = (await authed(app, 'GET', '/sluice/audit?consumer=stats')).json<
      { action: string; actor: string; details: Record<string, unknown> }[]
    >();
    expect(audit.filter((a) => a.actor === 'alice').map((a) => a.action)).toEqual([
      'version-dropped',
      'version-live',
      'rebuild-takeover',
      'rebuild-resumed',
      'rebuild-paused',
    ]);
    expect(audit.find((a) => a.action === 'rebuild-paused')?.details).toMatchObject({
      version: 2,
      reason: 'night batch first',
    });
  });

  test('approving a rebuild far behind is 409 SLUICE_REBUILD_NOT_READY and changes nothing; with force the live version stops at the barrier until the rebuild reaches it', async () => {
    const { app, schema, handled } = await buildVersioned();
    expect((await post(app, 'stats/rebuild/pause')).statusCode).toBe(200);
    await appendEvents(db.sql, 1_200, undefined, schema);
    await drainUntilIdle(app.sluice.dispatcher, { timeoutMs: 20_000 });
    expect((await post(app, 'stats/rebuild/resume')).statusCode).toBe(200);

    const before = await versionState(schema);
    const refused = post(app, 'stats/rebuild/approve', { reason: 'too early' });
    await expectRefused(refused, 409, 'SLUICE_REBUILD_NOT_READY', 'approve far behind');
    expect((await refused).json<{ message: string }>().message).toContain('1200 events behind the log head');
    expect(await versionState(schema)).toEqual(before);

    const forced = await post(app, 'stats/rebuild/approve', { force: true, reason: 'cut over tonight' });
    expect(forced.statusCode, forced.body).toBe(200);
    expect(forced.json()).toEqual({ consumer: 'stats', version: 2, state: 'taking-over', barrier: '1200' });
    expect(await rebuildOf(app)).toMatchObject({ state: 'taking-over', barrier: '1200', lagEvents: '1200' });
    const stopped = (await stateOf(schema)).find((r) => r['name'] === 'stats');
    expect(stopped).toMatchObject({ status: 'disabled', cursor: '1200' });
    // Taking over: nothing but abandon applies.
    await expectRefused(post(app, 'stats/rebuild/pause'), 409, 'SLUICE_REBUILD_STATE', 'pause taking over');

    await appendEvents(db.sql, 5, undefined, schema);
    await passUntil(
      app.sluice.dispatcher,
      async () => ((await rebuildOf(app)) ?? null) === null,
      'version 2 is live',
    );
    await drainUntilIdle(app.sluice.dispatcher, { timeoutMs: 20_000 });
    expect(handled(2)).toEqual(Array.from({ length: 1_205 }, (_, i) => i + 1));
    expect(handled(1)).toHaveLength(1_200); // it stopped at the barrier
    const [status] = (await get(app, 'rebuilds')).json<
      { versions: { version: number; state: string }[] }[]
    >();
    expect(status?.versions.map((v) => [v.version, v.state])).toEqual([
      [1, 'retired'],
      [2, 'live'],
    ]);
  });

  test('abandon removes the rebuild and lets the live version go on, even once its takeover stopped it', async () => {
    const { app, schema, handled } = await buildVersioned();
    expect((await post(app, 'stats/rebuild/pause')).statusCode).toBe(200);
    await appendEvents(db.sql, 10, undefined, schema);
    await drainUntilIdle(app.sluice.dispatcher);
    expect((await post(app, 'stats/rebuild/resume')).statusCode).toBe(200);
    // Within 1,000 events of the head: approved without force; version 2 has not reached the barrier.
    const approved = await post(app, 'stats/rebuild/approve');
    expect(approved.json()).toEqual({ consumer: 'stats', version: 2, state: 'taking-over', barrier: '10' });
    expect((await stateOf(schema)).find((r) => r['name'] === 'stats')).toMatchObject({ status: 'disabled' });

    const abandoned = await post(app, 'stats/rebuild/abandon', { version: 2, reason: 'wrong shape' });
    expect(abandoned.statusCode, abandoned.body).toBe(200);
    expect(abandoned.json()).toEqual({ consumer: 'stats', version: 2, state: 'abandoned', barrier: null });
    expect((await stateOf(schema)).map((r) => [String(r['name']), String(r['status'])])).toEqual([
      ['feed', 'idle'],
      ['stats', 'idle'],
    ]);
    const [status] = (await get(app, 'rebuilds')).json<
      { versions: { version: number; state: string }[]; rebuild: unknown }[]
    >();
    expect([status?.versions.map((v) => [v.version, v.state]), status?.rebuild]).toEqual([
      [
        [1, 'live'],
        [2, 'abandoned'],
      ],
      null,
    ]);
    for (const action of ['approve', 'pause', 'resume', 'abandon']) {
      await expectRefused(post(app, `stats/rebuild/${action}`), 404, 'SLUICE_REBUILD_NOT_FOUND', action);
    }
    await expectRefused(post(app, 'stats/versions/2/drop'), 409, 'SLUICE_REBUILD_STATE', 'drop abandoned');
    await appendEvents(db.sql, 3, undefined, schema);
    await drainUntilIdle(app.sluice.dispatcher);
    expect(handled(1)).toEqual(Array.from({ length: 13 }, (_, i) => i + 1));
    expect(handled(2)).toEqual([]);
  });

  test('bad versions, names and types are 400 before any action; nothing changes', async () => {
    const { app, schema } = await buildVersioned();
    await appendEvents(db.sql, 5, undefined, schema);
    // The plugin's dispatcher delivers them meanwhile: the state compared is the one after that.
    await drainUntilIdle(app.sluice.dispatcher);
    const before = await versionState(schema);
    // (Unknown fields and coercible types are refused before the host's Ajv: see the test on them.)
    const cases: [label: string, url: string, payload: object | string][] = [
      ['version 0', 'stats/rebuild/approve', { version: 0 }],
      ['a negative version', 'stats/rebuild/pause', { version: -2 }],
      ['a version that is not whole', 'stats/rebuild/approve', { version: 1.5 }],
      ['a version that is not a number', 'stats/rebuild/abandon', { version: 'two' }],
      ['a version beyond int4', 'stats/rebuild/resume', { version: 2_147_483_648 }],
      ['a version beyond 2^53', 'stats/rebuild/abandon', '{"version": 9007199254740993}'],
      ['force that is not a boolean', 'stats/rebuild/approve', { force: 'yes' }],
      ['force as text', 'stats/rebuild/approve', { force: 'true' }],
      ['a version as text', 'stats/rebuild/pause', { version: '2' }],
      ['an unknown field', 'stats/rebuild/approve', { versoin: 2 }],
      ['a reason that is not text', 'stats/rebuild/abandon', { reason: {} }],
      ['a reason over 1000 characters', 'stats/rebuild/pause', { reason: 'r'.repeat(1001) }],
      ['a body that is an array', 'stats/rebuild/approve', '[2]'],
      ['malformed JSON', 'stats/rebuild/approve', '{"force": '],
      ['a NUL in the name', 'a%00b/rebuild/approve', {}],
      ['a name over 200 bytes', `${encodeURIComponent('\u00e9'.repeat(101))}/rebuild/abandon`, {}],
      ['a version path that is text', 'stats/versions/one/drop', {}],
      ['a version path of 0', 'stats/versions/0/drop', {}],
      ['a version path with a leading zero', 'stats/versions/01/drop', {}],
      ['a version path of 11 digits', 'stats/versions/12345678901/drop', {}],
      ['a version path beyond int4', 'stats/versions/9999999999/drop', {}],
      ['a negative version path', 'stats/versions/-1/drop', {}],
      ['dropSource that is not a boolean', 'stats/versions/1/drop', { dropSource: 'yes' }],
    ];
    for (const [label, url, payload] of cases) {
      const response = await app.inject({
        method: 'POST',
        url: `/sluice/consumers/${url}`,
        headers: { ...auth, 'content-type': 'application/json' },
        payload: typeof payload === 'string' ? payload : JSON.stringify(payload),
      });
      expect(response.statusCode, `${label}: ${response.body}`).toBe(400);
    }
    const bad = await authed(app, 'GET', '/sluice/consumers/a%00b/rebuild');
    expect(bad.statusCode, bad.body).toBe(400);
    expect(await versionState(schema)).toEqual(before);
  });

  test('the rebuild routes answer 401 without credentials, 405 when read-only, and change nothing', async () => {
    const requests: [method: 'GET' | 'POST', url: string, payload?: object][] = [
      ['GET', 'rebuilds'],
      ['GET', 'consumers/stats/rebuild'],
      ['POST', 'consumers/stats/rebuild/approve', { force: true }],
      ['POST', 'consumers/stats/rebuild/pause', {}],
      ['POST', 'consumers/stats/rebuild/resume', {}],
      ['POST', 'consumers/stats/rebuild/abandon', { version: 2 }],
      ['POST', 'consumers/stats/versions/1/drop', { dropSource: true }],
    ];
    const { app, schema } = await buildVersioned();
    const before = await versionState(schema);
    for (const [method, url, payload] of requests) {
      for (const headers of [{}, { authorization: 'Bearer wrong-token-000000000' }]) {
        const response = await app.inject({
          method,
          url: `/sluice/${url}`,
          headers,
          ...(payload === undefined ? {} : { payload }),
        });
        expect(response.statusCode, `${method} ${url}`).toBe(401);
        expect(response.json()).toMatchObject({ code: 'SLUICE_UNAUTHORIZED' });
      }
    }
    expect(await versionState(schema)).toEqual(before);

    const readOnly = await buildVersioned({ readOnly: true });
    const readOnlyBefore = await versionState(readOnly.schema);
    for (const [method, url, payload] of requests) {
      const response = await authed(readOnly.app, method, `/sluice/${url}`, payload);
      if (method === 'GET') expect(response.statusCode, url).toBe(200);
      else {
        expect(response.statusCode, url).toBe(405);
        expect(response.json()).toMatchObject({ code: 'SLUICE_READ_ONLY' });
      }
    }
    expect(await versionState(readOnly.schema)).toEqual(readOnlyBefore);
  });
});

describe('cross-site writes, body types and caching', () => {
  const OPERATOR = { username: 'operator', password: 'correct-horse-battery' };
  /** The credentials a browser caches after the dashboard's Basic prompt and sends on every request. */
  const basic = {
    authorization: `Basic ${Buffer.from(`${OPERATOR.username}:${OPERATOR.password}`).toString('base64')}`,
  };
  /** A host app as many are: a form parser, and a text/plain parser that reads JSON (for sendBeacon). */
  const parsingHost: Host = {
    before: (app) => {
      app.addContentTypeParser(
        'application/x-www-form-urlencoded',
        { parseAs: 'string' },
        (_r, body, done) => {
          done(null, Object.fromEntries(new URLSearchParams(body as string)));
        },
      );
      app.removeContentTypeParser('text/plain');
      app.addContentTypeParser('text/plain', { parseAs: 'string' }, (_r, body, done) => {
        try {
          done(null, JSON.parse(body as string) as unknown);
        } catch (error) {
          done(error as Error, undefined);
        }
      });
      // Anything else as form fields too (what a multipart parser with fields on the body gives).
      app.addContentTypeParser('*', { parseAs: 'string' }, (_r, body, done) => {
        done(null, Object.fromEntries(new URLSearchParams(body as string)));
      });
    },
  };
  const EVIL = 'https://evil.example';
  /** What a browser sends with a form another site submits to the ops routes. */
  const crossSiteForm = {
    origin: EVIL,
    'sec-fetch-site': 'cross-site',
    'sec-fetch-mode': 'navigate',
    'sec-fetch-dest': 'document',
  };

  async function buildDead(ops: Partial<OpsOptions> = {}, host: Host = parsingHost) {
    const built = await build(
      [
        failingOn('mailer', (e) => e.id === 2n, { errorPolicy: { maxAttempts: 1 } }).consumer,
        recordingConsumer('feed').consumer,
      ],
      { auth: basicAuth(OPERATOR), ...ops },
      host,
    );
    await deadMailer(built.app, built.schema);
    return built;
  }

  async function everything(schema: string) {
    const table = (name: string) => db.sql(`${schema}.${name}`);
    return {
      consumers: await stateOf(schema),
      deadLetters: await db.sql`select * from ${table('dead_letters')} order by id`,
      audit: await db.sql`select * from ${table('audit')} order by id`,
    };
  }

  test('a cross-site form POST with valid Basic credentials to every write route changes nothing', async () => {
    const { app, schema, routes } = await buildDead();
    const writes = routes.filter((r) => r.url.startsWith('/sluice') && (r.write || r.method !== 'GET'));
    expect(writes.length).toBe(14);
    expect(writes.every((r) => r.write)).toBe(true);
    // Sanity: the host's parsers read a form, so without the checks these bodies would be accepted.
    const before = await everything(schema);
    const statuses: string[] = [];
    for (const route of writes) {
      const url = route.url.replace(':name', 'mailer').replace(':version', '1');
      // The fields an attacker would send: what moves the cursor, un-sticks the consumer, or forces
      // a takeover.
      const attack = Object.fromEntries(
        Object.entries({
          from: 'now',
          eventId: '2',
          key: 'mailer',
          lanes: '8',
          force: 'true',
          dropSource: 'true',
          reason: 'csrf',
        }).filter(([field]) => route.bodyFields.includes(field)),
      );
      const form = new URLSearchParams(attack).toString();
      const cases: [label: string, headers: Record<string, string>, payload: string, status: number][] = [
        ['form', { ...crossSiteForm, 'content-type': 'application/x-www-form-urlencoded' }, form, 403],
        ['empty form', { ...crossSiteForm, 'content-type': 'application/x-www-form-urlencoded' }, '', 403],
        [
          'text/plain form carrying JSON',
          { ...crossSiteForm, 'content-type': 'text/plain' },
          `${JSON.stringify(attack).slice(0, -1)},"x":"="}`,
          403,
        ],
        [
          'multipart form',
          { ...crossSiteForm, 'content-type': 'multipart/form-data; boundary=x' },
          form,
          403,
        ],
        [
          'same-site subdomain',
          {
            origin: 'https://blog.localhost',
            'sec-fetch-site': 'same-site',
            'content-type': 'application/x-www-form-urlencoded',
          },
          form,
          403,
        ],
        [
          'no-cors fetch without a body',
          { origin: EVIL, 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'no-cors' },
          '',
          403,
        ],
        [
          'older browser (Origin only)',
          { origin: EVIL, 'content-type': 'application/x-www-form-urlencoded' },
          form,
          403,
        ],
        [
          'sandboxed frame (Origin null)',
          { origin: 'null', 'content-type': 'application/x-www-form-urlencoded' },
          form,
          403,
        ],
        [
          'a browser that sends neither header',
          { 'content-type': 'application/x-www-form-urlencoded' },
          form,
          415,
        ],
      ];
      for (const [label, headers, payload, status] of cases) {
        const response = await app.inject({
          method: 'POST',
          url,
          headers: { ...basic, ...headers },
          payload,
        });
        statuses.push(`${response.statusCode}`);
        expect(response.statusCode, `${label}: POST ${url}: ${response.body}`).toBe(status);
        expect(response.json()).toMatchObject({
          code: status === 403 ? 'SLUICE_CROSS_SITE_REQUEST' : 'SLUICE_UNSUPPORTED_MEDIA_TYPE',
        });
        expect(response.headers['cache-control']).toBe('no-store');
      }
    }
    expect(statuses.length).toBe(14 * 9);
    expect(await everything(schema)).toEqual(before);
  });

  test.each([
    ['text/plain', 'text/plain', '{}'],
    ['a form', 'application/x-www-form-urlencoded', 'reason=x'],
    ['an empty form', 'application/x-www-form-urlencoded', ''],
    ['multipart', 'multipart/form-data; boundary=x', '--x--\r\n'],
    ['application/json with a tab before the semicolon', 'application/json\t;', '{}'],
    ['application/json with a tab', 'application/json\t', '{}'],
    ['a type that only starts with application/json', 'application/jsonx', '{}'],
    ['a JSON-based type', 'application/vnd.api+json', '{}'],
    ['JSON in UTF-16', 'application/json; charset=utf-16le', '{}'],
    ['JSON in UTF-7', 'application/json; charset=utf-7', '{}'],
    ['two types', 'application/json, text/plain', '{}'],
    ['an empty type', '', '{}'],
    ['no type with a body', undefined, '{}'],
    ['no type and no body (a bare curl -X POST)', undefined, ''],
  ])('a write with %s is 415 before any parsing, whatever the host parses', async (_label, type, payload) => {
    const { app, schema } = await buildDead();
    const before = await everything(schema);
    const response = await app.inject({
      method: 'POST',
      url: '/sluice/consumers/feed/disable',
      headers: { ...basic, ...(type === undefined ? {} : { 'content-type': type }) },
      payload: Buffer.from(payload),
    });
    expect(response.statusCode, response.body).toBe(415);
    expect(response.json()).toMatchObject({ statusCode: 415, code: 'SLUICE_UNSUPPORTED_MEDIA_TYPE' });
    expect(response.json<{ message: string }>().message).toContain('application/json');
    expect(await everything(schema)).toEqual(before);
  });

  test.each([
    ['application/json', 'application/json', '{}'],
    ['a charset', 'application/json; charset=utf-8', '{}'],
    ['upper case and a quoted charset', 'Application/JSON;Charset="UTF-8"', '{}'],
    ['a space before the semicolon', 'application/json ; charset=UTF-8', '{}'],
  ])('a write with %s goes through', async (_label, type, payload) => {
    const { app, schema } = await buildDead();
    const response = await app.inject({
      method: 'POST',
      url: '/sluice/consumers/feed/disable',
      headers: { ...basic, 'content-type': type },
      payload,
    });
    expect(response.statusCode, response.body).toBe(200);
    expect((await stateOf(schema)).find((r) => r['name'] === 'feed')).toMatchObject({ status: 'disabled' });
  });

  test("the host's own JSON parser never reads an ops body", async () => {
    // A host parser that accepts comments (and would hand the ops routes whatever it makes of a body).
    const { app, schema } = await buildDead(
      {},
      {
        before: (host) => {
          host.removeContentTypeParser('application/json');
          host.addContentTypeParser('application/json', { parseAs: 'string' }, (_r, body, done) => {
            done(null, JSON.parse((body as string).replace(/\/\*.*?\*\//g, '')) as unknown);
          });
        },
      },
    );
    const response = await app.inject({
      method: 'POST',
      url: '/sluice/consumers/mailer/skip',
      headers: { ...basic, 'content-type': 'application/json' },
      payload: '{"eventId": "2" /* the stuck one */}',
    });
    expect(response.statusCode, response.body).toBe(400);
    expect(response.json()).toMatchObject({ code: 'FST_ERR_CTP_INVALID_JSON_BODY' });
    expect((await stateOf(schema)).find((r) => r['name'] === 'mailer')).toMatchObject({ status: 'dead' });
  });

  const json = { 'content-type': 'application/json' };
  test.each<[string, number, Record<string, string>]>([
    ['Sec-Fetch-Site cross-site', 403, { 'sec-fetch-site': 'cross-site', origin: EVIL }],
    ['Sec-Fetch-Site same-site', 403, { 'sec-fetch-site': 'same-site', origin: 'https://a.localhost' }],
    ['an unknown Sec-Fetch-Site', 403, { 'sec-fetch-site': 'cross-origin' }],
    ['a foreign Origin', 403, { origin: EVIL }],
    ['Origin null', 403, { origin: 'null' }],
    ['the own host on another port', 403, { origin: 'http://localhost:8080' }],
    ['the own host over another scheme', 403, { origin: 'https://localhost' }],
    ['an Origin with a path', 403, { origin: 'http://localhost/sluice' }],
    ['Sec-Fetch-Site same-origin', 200, { 'sec-fetch-site': 'same-origin', origin: 'http://localhost' }],
    ['Sec-Fetch-Site none (typed by the user)', 200, { 'sec-fetch-site': 'none' }],
    ['the own origin (no Sec-Fetch-Site: plain HTTP)', 200, { origin: 'http://localhost' }],
    ['the own origin with its port', 200, { host: 'ops.example:3000', origin: 'http://ops.example:3000' }],
    ['neither header (curl, the CLI)', 200, {}],
  ])('a JSON write with %s answers %i', async (_label, status, headers) => {
    const { app, schema } = await buildDead();
    const response = await app.inject({
      method: 'POST',
      url: '/sluice/consumers/feed/disable',
      headers: { ...basic, ...json, ...headers },
      payload: '{}',
    });
    expect(response.statusCode, response.body).toBe(status);
    const feed = (await stateOf(schema)).find((r) => r['name'] === 'feed');
    expect(feed).toMatchObject({ status: status === 200 ? 'disabled' : 'idle' });
    if (status === 403) {
      expect(response.json()).toMatchObject({ statusCode: 403, code: 'SLUICE_CROSS_SITE_REQUEST' });
      expect(await auditCount(schema)).toBe(0);
    }
  });

  test('reads are not refused cross-site (a link to the dashboard keeps working)', async () => {
    const { app } = await buildDead();
    for (const url of ['/sluice/', '/sluice/consumers']) {
      const response = await app.inject({ method: 'GET', url, headers: { ...basic, ...crossSiteForm } });
      expect(response.statusCode, url).toBe(200);
    }
  });

  test('ops.allowedOrigins lets the listed origins write, and only them', async () => {
    const { app, schema } = await buildDead({ allowedOrigins: ['https://console.example.com'] });
    const send = (origin: string) =>
      app.inject({
        method: 'POST',
        url: '/sluice/consumers/feed/disable',
        headers: { ...basic, ...json, origin, 'sec-fetch-site': 'cross-site' },
        payload: '{}',
      });
    for (const origin of ['https://console.example.com.evil.example', 'http://console.example.com', EVIL]) {
      expect((await send(origin)).statusCode, origin).toBe(403);
    }
    expect(await auditCount(schema)).toBe(0);
    expect((await send('https://console.example.com')).statusCode).toBe(200);
    // The allowed origin still sends JSON only.
    const form = await app.inject({
      method: 'POST',
      url: '/sluice/consumers/feed/enable',
      headers: {
        ...basic,
        origin: 'https://console.example.com',
        'sec-fetch-site': 'cross-site',
        'content-type': 'application/x-www-form-urlencoded',
      },
      payload: '',
    });
    expect(form.statusCode).toBe(415);
  });

  test("behind a proxy, the request's own origin follows trustProxy", async () => {
    const forwarded = {
      ...basic,
      ...json,
      'x-forwarded-host': 'ops.example.com',
      'x-forwarded-proto': 'https',
      origin: 'https://ops.example.com',
    };
    const send = (app: FastifyInstance) =>
      app.inject({
        method: 'POST',
        url: '/sluice/consumers/feed/disable',
        headers: forwarded,
        payload: '{}',
      });
    const direct = await buildDead({}, {});
    expect((await send(direct.app)).statusCode).toBe(403);
    const proxied = await buildDead({}, { server: { trustProxy: true } });
    expect((await send(proxied.app)).statusCode).toBe(200);
  });

  test.each([
    ['a wildcard subdomain', ['https://*.example.com']],
    ['a bare wildcard', ['*']],
    ['a trailing slash', ['https://ops.example.com/']],
    ['a path', ['https://ops.example.com/sluice']],
    ['upper case', ['https://OPS.example.com']],
    ['the default port', ['https://ops.example.com:443']],
    ['another scheme', ['ftp://ops.example.com']],
    ['null', ['null']],
    ['an empty string', ['']],
    ['not a string', [42]],
    ['not an array', 'https://ops.example.com'],
  ])('ops.allowedOrigins with %s is refused at registration', async (_label, allowedOrigins) => {
    await expect(
      boot({ auth: basicAuth(OPERATOR), allowedOrigins: allowedOrigins as string[] }),
    ).rejects.toMatchObject({
      code: 'SLUICE_INVALID_OPTION',
      option: 'ops.allowedOrigins',
    });
  });

  test('every ops response carries Cache-Control: no-store, authenticated or not', async () => {
    const { app, routes } = await buildDead({}, {});
    const opsRoutes = routes.filter((r) => r.url.startsWith('/sluice'));
    const requests: (InjectOptions & { url: string })[] = [];
    for (const route of opsRoutes) {
      const url = route.url.replace(':name', 'feed');
      const payload =
        route.method === 'POST'
          ? Object.fromEntries(
              Object.entries({ from: 'now', eventId: '1' }).filter(([f]) => route.bodyFields.includes(f)),
            )
          : undefined;
      const methods = route.method === 'GET' ? (['GET', 'HEAD'] as const) : (['POST'] as const);
      for (const method of methods) {
        for (const headers of [basic, {}, { authorization: 'Basic d3Jvbmc6d3Jvbmc=' }]) {
          requests.push({ method, url, headers, ...(payload ? { payload } : {}) });
        }
      }
    }
    // Errors after authentication: unknown consumer, unknown route, invalid input, wrong type.
    requests.push(
      { method: 'GET', url: '/sluice/consumers/nobody', headers: basic },
      { method: 'GET', url: '/sluice/nope', headers: basic },
      { method: 'GET', url: '/sluice/audit?limit=0', headers: basic },
      { method: 'POST', url: '/sluice/consumers/feed/skip', headers: basic, payload: { eventId: 'x' } },
      {
        method: 'POST',
        url: '/sluice/consumers/feed/enable',
        headers: { ...basic, origin: EVIL },
        payload: {},
      },
      {
        method: 'POST',
        url: '/sluice/consumers/feed/enable',
        headers: { ...basic, 'content-type': 'text/plain' },
        payload: '{}',
      },
    );
    const statuses = new Set<number>();
    for (const request of requests) {
      const response = await app.inject(request);
      statuses.add(response.statusCode);
      const what = `${request.method ?? 'GET'} ${request.url} → ${response.statusCode}`;
      expect(response.headers['cache-control'], what).toBe('no-store');
    }
    expect([...statuses]).toEqual(expect.arrayContaining([200, 400, 401, 403, 404, 409, 415]));
  });
});

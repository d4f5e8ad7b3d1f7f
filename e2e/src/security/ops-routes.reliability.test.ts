// The ops routes under attack (X1–X9 and R4; invariant I10): a real Fastify app
// with the Sluice plugin and bearer or Basic auth on the test database, whose pool counts every
// statement it sends. Every rejected request must change nothing and (for 400/401/403/405/413/414/
// 415) send no SQL at all; no input may ever produce a 5xx. The abuse cases run against three host
// apps: bare Fastify, one with @fastify/formbody and one with @fastify/multipart registered before
// the plugin (their parsers are what a cross-site form relies on); the races once, on the bare one.
import { gzipSync } from 'node:zlib';
import type { Consumer, EventRecord } from '@sluice/core';
import { appendEvents, consumerRow, until } from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import type { InjectOptions, LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { encodeComponent, injectionCorpus } from './corpus.js';
import {
  AUTH,
  BASIC,
  buildOpsApp,
  ECHO,
  PREFIX,
  TOKEN,
  type HostKind,
  type OpsApp,
  type Statement,
  type TableState,
} from './ops-app.js';
import { SuiteRecorder, tally, Violations, type Figures } from './recorder.js';

const db = await useTestDatabase();
/** Each host app's results are a suite of their own in RESULTS.md. */
const HOSTS: readonly { readonly host: HostKind; readonly suite: string }[] = [
  { host: 'bare', suite: 'security' },
  { host: 'formbody', suite: 'security-formbody' },
  { host: 'multipart', suite: 'security-multipart' },
];

// Event ids start at 2^53: the stuck event 2^53+1 is the first id a JSON number cannot carry.
const FIRST = 2n ** 53n;
const STUCK = FIRST + 1n; // 9007199254740993: poison for mailer and racer
const SECOND_POISON = FIRST + 3n;
const NFC = 'caf\u00e9';
const NFD = 'cafe\u0301';
const NAIVE = 'na\u00efve';
const LONGEST = 'x'.repeat(200);
/** Statuses that mean "refused before any work": such a request must not reach SQL (I10). */
const REFUSED = new Set([400, 401, 403, 405, 413, 414, 415]);

const isPoison = (event: EventRecord) => event.data['poison'] === true;
function poisoned(name: string): Consumer {
  return {
    name,
    errorPolicy: { maxAttempts: 1 },
    handler: (event) => {
      if (isPoison(event)) throw new Error(`poison event ${event.id}`);
    },
  };
}
const healthy = (name: string): Consumer => ({ name, handler: () => undefined });

/** No lone surrogate: the string has a UTF-8 form (ES2024 String#isWellFormed). */
const wellFormed = (s: string) =>
  !/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(s);
function post(path: string, payload: unknown, headers: Record<string, string> = {}): InjectOptions {
  return {
    method: 'POST',
    url: `${PREFIX}${path}`,
    headers: { ...AUTH, 'content-type': 'application/json', ...headers },
    payload: typeof payload === 'string' || Buffer.isBuffer(payload) ? payload : JSON.stringify(payload),
  };
}
const get = (path: string): InjectOptions => ({ method: 'GET', url: `${PREFIX}${path}`, headers: AUTH });

function differences(before: TableState, after: TableState): string[] {
  return Object.keys(before).filter((table) => before[table] !== after[table]);
}

describe.each(HOSTS)('security, $host host app', ({ host, suite }) => {
  let recorder: SuiteRecorder;
  let ops: OpsApp;

  beforeAll(async () => {
    recorder = new SuiteRecorder(suite);
    ops = await buildOpsApp(db, {
      host,
      consumers: [
        poisoned('mailer'),
        poisoned('racer'),
        healthy('scribe'),
        healthy('rewinder'),
        healthy(NFC),
        healthy(NFD),
        healthy(NAIVE),
        healthy(LONGEST),
      ],
      firstId: FIRST,
    });
    // Ids 2^53 … 2^53+4; 2^53+1 and 2^53+3 are poison.
    await appendEvents(
      db.sql,
      5,
      (n) => ({ streamId: 'sec', type: 'SecurityTest', data: { n, poison: n === 1 || n === 3 } }),
      ops.schema,
    );
    await ops.app.sluice.dispatcher.runOnce();
    expect(await consumerRow(db.sql, ops.schema, 'mailer')).toMatchObject({
      status: 'dead',
      stuckEventId: STUCK,
      cursor: FIRST,
    });
  });

  afterAll(async () => {
    await ops.close();
    await recorder.write(db.sql);
  });

  test('X1 every ops route answers 401 to every bad credential, sends no SQL, changes nothing', async () => {
    await recorder.run('X1', 'Unauthenticated ops', ['I10'], async (figures) => {
      const violations = new Violations();
      const opsRoutes = ops.routes.filter((r) => r.url === PREFIX || r.url.startsWith(`${PREFIX}/`));
      const registered = new Set(opsRoutes.map((r) => `${r.method} ${r.url}`));
      const urls = [...new Set([...opsRoutes.map((r) => r.url), `${PREFIX}/`, `${PREFIX}/nope`])];
      const writes = opsRoutes.filter((r) => r.method === 'POST').length;
      expect(registered.size).toBeGreaterThanOrEqual(25);
      expect(writes).toBe(14);
      expect(urls.filter((u) => u.includes('dashboard')).length).toBe(3);
      // The payload views: one event in a consumer's context, one dead letter.
      for (const route of [
        `GET ${PREFIX}/consumers/:name/events/:eventId`,
        `GET ${PREFIX}/consumers/:name/dead-letters/:id`,
      ]) {
        expect(registered.has(route), route).toBe(true);
      }
      // The dashboard's page shell: the page, its stylesheet and script modules, and nothing else.
      const shell = opsRoutes.filter((r) => r.shell && r.method === 'GET').map((r) => r.url);
      const modules = shell.filter((u) => /^\/sluice\/ui\/[a-z-]+\.js$/.test(u));
      expect(modules.length).toBeGreaterThanOrEqual(8);
      expect(shell.sort()).toEqual(
        [
          PREFIX, // the page at `<prefix>/` (Fastify lists the prefix's root route without the slash)
          `${PREFIX}/dashboard`,
          `${PREFIX}/dashboard.css`,
          `${PREFIX}/dashboard.js`,
          ...modules,
        ].sort(),
      );

      // Sanity: with the token the same app answers (so the 401s below are the auth hook's doing).
      expect((await ops.request(get('/consumers'))).response.statusCode).toBe(200);

      const header = Buffer.from(JSON.stringify({ alg: 'HS256', typ: 'JWT' })).toString('base64url');
      const claims = Buffer.from(JSON.stringify({ sub: 'ops', exp: 978307200 })).toString('base64url');
      const none = Buffer.from(JSON.stringify({ alg: 'none', typ: 'JWT' })).toString('base64url');
      const credentials: [string, Record<string, string | string[]>][] = [
        ['no header', {}],
        ['wrong token', { authorization: `Bearer ${'w'.repeat(TOKEN.length)}` }],
        ['empty', { authorization: '' }],
        ['Bearer without token', { authorization: 'Bearer' }],
        ['Bearer and a space', { authorization: 'Bearer ' }],
        [
          'Basic scheme',
          { authorization: `Basic ${Buffer.from(`security-suite:${TOKEN}`).toString('base64')}` },
        ],
        // ('bearer <token>' is the same scheme, RFC 9110: accepted, see bearer-auth.test.ts.)
        ['lowercase bearer, wrong token', { authorization: `bearer ${'w'.repeat(TOKEN.length)}` }],
        ['token with trailing space', { authorization: `Bearer ${TOKEN} ` }],
        ['expired JWT', { authorization: `Bearer ${header}.${claims}.c2lnbmF0dXJl` }],
        ['alg none JWT', { authorization: `Bearer ${none}.${claims}.` }],
        ['token without scheme', { authorization: TOKEN }],
        ['two spaces', { authorization: `Bearer  ${TOKEN}` }],
        ['token prefix', { authorization: `Bearer ${TOKEN.slice(0, -1)}` }],
        ['token plus a character', { authorization: `Bearer ${TOKEN}x` }],
        ['two authorization headers', { authorization: ['Bearer wrong', `Bearer ${TOKEN}`] }],
        ['x-authorization', { 'x-authorization': `Bearer ${TOKEN}` }],
        ['proxy-authorization', { 'proxy-authorization': `Bearer ${TOKEN}` }],
      ];
      const methods = ['GET', 'POST', 'HEAD', 'OPTIONS', 'PUT', 'DELETE'] as const;
      // A valid body for every write route: a bypass would restart to 0 or skip the stuck event.
      const body = JSON.stringify({ from: '0', eventId: STUCK.toString() });
      const before = await ops.state();
      let requests = 0;
      let registeredRequests = 0;
      let registered401 = 0;
      let statements = 0;
      const otherStatuses: number[] = [];
      for (const url of urls) {
        for (const method of methods) {
          const isRegistered = registered.has(`${method} ${url}`);
          for (const [label, headers] of credentials) {
            const withBody = method === 'POST' || method === 'PUT' || method === 'DELETE';
            const { response, statements: sent } = await ops.request({
              method,
              url: `${url.replace(':name', 'mailer').replace(':version', '1')}?access_token=${TOKEN}`,
              headers: { ...headers, ...(withBody ? { 'content-type': 'application/json' } : {}) },
              ...(withBody ? { payload: body } : {}),
            });
            requests++;
            statements += sent.length;
            const status = response.statusCode;
            if (sent.length > 0)
              violations.add(`${method} ${url} (${label}): ${sent.length} SQL statement(s)`);
            if (isRegistered) {
              registeredRequests++;
              if (status === 401) registered401++;
              else violations.add(`${method} ${url} (${label}): ${status}, expected 401`);
            } else {
              otherStatuses.push(status);
              if (![401, 404, 405].includes(status)) {
                violations.add(`${method} ${url} (${label}) (not a route): ${status}`);
              }
            }
          }
        }
      }
      const after = await ops.state();
      const changed = differences(before, after);
      recorder.faults['unauthenticated requests'] = requests;
      figures['routes (method+path)'] = registered.size;
      figures['credential variants'] = credentials.length;
      figures['requests'] = requests;
      figures['routes 401'] = `${((100 * registered401) / registeredRequests).toFixed(1)}%`;
      figures['other method+path'] = tally(otherStatuses);
      figures['SQL statements'] = statements;
      figures['state changes'] = changed.length;
      if (changed.length > 0) violations.add(`tables changed: ${changed.join(', ')}`);

      // With a bearer token only, a browser cannot prompt for credentials: the page shell (no
      // data) loads without them and asks for the token. Every other route still answers 401.
      const probe = 'bearer-only-probe';
      const bearerOnly = await buildOpsApp(db, { host, auth: 'bearer', consumers: [healthy(probe)] });
      try {
        const bearerRoutes = bearerOnly.routes.filter((r) => r.url.startsWith(`${PREFIX}/`));
        let shellRequests = 0;
        let apiRequests = 0;
        for (const route of bearerRoutes) {
          const withBody = route.method === 'POST';
          const url = route.url
            .replace(':name', probe)
            .replace(/:(eventId|id)\b/, '1')
            .replace(':version', '1');
          const answers = new Set<string>();
          for (const [label, headers] of credentials) {
            const { response, statements: sent } = await bearerOnly.request({
              method: route.method,
              url,
              headers: { ...headers, ...(withBody ? { 'content-type': 'application/json' } : {}) },
              ...(withBody ? { payload: body } : {}),
            });
            if (sent.length > 0) violations.add(`bearer-only ${route.method} ${url} (${label}): SQL sent`);
            if (route.shell) {
              shellRequests++;
              if (response.statusCode !== 200)
                violations.add(`bearer-only shell ${route.method} ${url} (${label}): ${response.statusCode}`);
              answers.add(response.body);
              if (response.body.includes(probe))
                violations.add(`bearer-only shell ${url}: names the consumer`);
            } else {
              apiRequests++;
              if (response.statusCode !== 401)
                violations.add(
                  `bearer-only ${route.method} ${url} (${label}): ${response.statusCode}, expected 401`,
                );
            }
          }
          // The shell is the same for everyone, whatever credentials come with the request.
          if (answers.size > 1) violations.add(`bearer-only shell ${url}: answers differ by credentials`);
        }
        figures['bearer-only: shell requests (200, no data)'] = shellRequests;
        figures['bearer-only: API requests (401)'] = apiRequests;
      } finally {
        await bearerOnly.close();
      }
      violations.assertNone('X1');
    });
  });

  test('X2 malformed consumer names are 4xx, never 5xx, change nothing, and never collide', async () => {
    await recorder.run('X2', 'Malformed consumer names', ['I10'], async (figures) => {
      const violations = new Violations();
      const routes: { method: 'GET' | 'POST'; path: string; body?: unknown }[] = [
        { method: 'GET', path: '' },
        { method: 'GET', path: '/diagnose' },
        { method: 'GET', path: '/dead-letters' },
        { method: 'GET', path: `/events/${STUCK}` },
        { method: 'GET', path: '/dead-letters/1' },
        { method: 'POST', path: '/restart', body: { from: '0' } },
        { method: 'POST', path: '/disable', body: {} },
        { method: 'POST', path: '/enable', body: {} },
        { method: 'POST', path: '/skip', body: { eventId: STUCK.toString() } },
        { method: 'POST', path: '/fence', body: { eventId: '5' } },
        { method: 'POST', path: '/dead-letters/replay', body: {} },
        { method: 'GET', path: '/parked-keys' },
        { method: 'GET', path: '/parked-keys/events?key=sec' },
        { method: 'POST', path: '/parked-keys/replay', body: { key: 'sec' } },
        { method: 'POST', path: '/parked-keys/drop', body: { key: 'sec' } },
        { method: 'POST', path: '/lanes', body: { lanes: 2 } },
      ];
      const names: [string, string][] = [
        ['empty segment', ''],
        ['201 bytes', 'n'.repeat(201)],
        ['101 two-byte characters (202 bytes)', encodeComponent('\u00e9'.repeat(101))],
        ['67 four-byte characters (268 bytes)', encodeComponent('\u{1f600}'.repeat(67))],
        ['10 KB', 'n'.repeat(10_240)],
        ['longer than maxParamLength (1001)', 'n'.repeat(1001)],
        ['NUL', '%00'],
        ['NUL inside', 'mail%00er'],
        ['NFD twin of an NFC-only name', encodeComponent('nai\u0308ve')],
        ['fullwidth lookalike', encodeComponent('\uff4d\uff41\uff49\uff4c\uff45\uff52')],
        ['space inside', 'mail%20er'],
        ['leading space', '%20mailer'],
        ['trailing space', 'mailer%20'],
        ['tab', 'mailer%09'],
        ['newline', 'mailer%0A'],
        ['../ encoded', '..%2F..%2Fetc%2Fpasswd'],
        ['.. encoded', '%2E%2E'],
        ['%2F alone', '%2F'],
        ['slash into another route', 'mailer%2Fskip'],
        ['RTL override', encodeComponent('\u202ereliam')],
        ['RTL override inside', encodeComponent('mai\u202eler')],
        ['zero-width space', encodeComponent('mailer\u200b')],
        ['upper case', 'MAILER'],
        ['LIKE wildcard _', 'maile_'],
        ['LIKE wildcard %', 'mail%25'],
        ['only %', '%25'],
        ['only _', '_'],
        ['question mark', 'mailer%3F'],
        ['hash', 'mailer%23'],
        ['invalid UTF-8 byte', '%FF'],
        ['overlong UTF-8 slash', '%C0%AF'],
        ['UTF-8 surrogate', '%ED%A0%80'],
        ['lone %', '%'],
        ['truncated UTF-8', 'mailer%E2%82'],
        ['the shared-row sentinel', '*'],
        ['SQL quote', encodeComponent("mailer' OR '1'='1")],
      ];
      const before = await ops.state();
      const statuses: number[] = [];
      let requests = 0;
      for (const [label, segment] of names) {
        for (const route of routes) {
          const { status, body, statements } = await ops.http({
            method: route.method,
            path: `${PREFIX}/consumers/${segment}${route.path}`,
            headers: { ...AUTH, ...(route.body ? { 'content-type': 'application/json' } : {}) },
            ...(route.body ? { body: JSON.stringify(route.body) } : {}),
          });
          requests++;
          statuses.push(status);
          const where = `${route.method} …/${label}${route.path}`;
          if (![400, 404, 414].includes(status)) violations.add(`${where}: ${status} ${codeOf(body)}`);
          if (REFUSED.has(status) && statements.length > 0) {
            violations.add(`${where}: ${status} after ${statements.length} SQL statement(s)`);
          }
        }
      }
      const after = await ops.state();
      const changed = differences(before, after);
      if (changed.length > 0) violations.add(`tables changed: ${changed.join(', ')}`);

      // NFC and NFD twins are two consumers: each URL reaches its own row, never the other.
      let collisions = 0;
      for (const [name, twin] of [
        [NFC, NFD],
        [NFD, NFC],
      ] as const) {
        const shown = await ops.request(get(`/consumers/${encodeComponent(name)}`));
        const shownName = shown.response.json<{ name?: string }>().name;
        if (shown.response.statusCode !== 200 || shownName !== name) {
          collisions++;
          violations.add(`GET ${JSON.stringify(name)}: ${shown.response.statusCode} ${shownName ?? ''}`);
        }
        const disabled = await ops.request(post(`/consumers/${encodeComponent(name)}/disable`, {}));
        const own = await consumerRow(db.sql, ops.schema, name);
        const other = await consumerRow(db.sql, ops.schema, twin);
        if (disabled.response.statusCode !== 200 || own.status !== 'disabled' || other.status !== 'idle') {
          collisions++;
          violations.add(`disable ${JSON.stringify(name)}: ${own.status} / twin ${other.status}`);
        }
        await ops.request(post(`/consumers/${encodeComponent(name)}/enable`, {}));
      }
      const longest = await ops.request(get(`/consumers/${LONGEST}`));
      if (longest.response.statusCode !== 200)
        violations.add(`200-byte name: ${longest.response.statusCode}`);

      recorder.faults['malformed-name requests'] = requests;
      figures['names'] = names.length;
      figures['requests'] = requests;
      figures['statuses'] = tally(statuses);
      figures['5xx'] = statuses.filter((s) => s >= 500).length;
      figures['colliding consumers'] = collisions;
      figures['state changes'] = changed.length;
      violations.assertNone('X2');
    });
  });

  test('X3 SQL-injection corpus in every path, query and body field: no 5xx, no SQL beyond the bound template', async () => {
    await recorder.run('X3', 'SQL injection corpus', ['I10'], async (figures) => {
      const violations = new Violations();
      const corpus = injectionCorpus('mailer');
      expect(corpus.length).toBeGreaterThanOrEqual(200);
      const q = encodeComponent;
      const numeric = (p: string, min: number, max: number) =>
        p.trim() !== '' && Number.isSafeInteger(Number(p)) && Number(p) >= min && Number(p) <= max;
      // Typed fields take the payload as the JSON literal it spells, when it spells a number or a
      // boolean (the ops routes refuse a string there before any SQL: the handler is not reached).
      const literal = (p: string): unknown => {
        try {
          const value: unknown = JSON.parse(p);
          return typeof value === 'number' || typeof value === 'boolean' ? value : p;
        } catch {
          return p;
        }
      };
      const integer = (p: string, min: number, max: number) => {
        const value = literal(p);
        return typeof value === 'number' && Number.isSafeInteger(value) && value >= min && value <= max;
      };
      const storable = (p: string) => Buffer.byteLength(p) <= 1000 && !p.includes('\u0000') && wellFormed(p);

      const untilBaseline = new Date(Date.now() + 86_400_000).toISOString();
      interface Position {
        readonly id: string;
        /** Benign values whose statements make up the legitimate templates of the position. */
        readonly baseline: readonly string[];
        readonly build: (payload: string) => InjectOptions;
        /** The input is legitimately accepted: a 2xx is fine (and then checked). */
        readonly accepts?: (payload: string) => boolean;
        /** Rows the position may legitimately change (only on a 2xx). */
        readonly mayChange?: 'scribe';
        readonly verify?: (payload: string, response: LightMyRequestResponse) => Promise<string | undefined>;
      }
      const positions: Position[] = [
        {
          id: 'path name (GET)',
          baseline: ['mailer', 'nobody'],
          build: (p) => get(`/consumers/${q(p)}`),
        },
        {
          id: 'path name (POST disable)',
          baseline: ['nobody'],
          build: (p) => post(`/consumers/${q(p)}/disable`, {}),
        },
        {
          id: 'query instance',
          baseline: ['*', 'nobody'],
          build: (p) => get(`/consumers/mailer?instance=${q(p)}`),
        },
        {
          id: 'query limit',
          baseline: ['5'],
          build: (p) => get(`/consumers/mailer/dead-letters?limit=${q(p)}`),
          accepts: (p) => numeric(p, 1, 1000),
        },
        {
          id: 'query consumer',
          baseline: ['mailer', 'nobody'],
          build: (p) => get(`/audit?consumer=${q(p)}`),
          accepts: (p) => Buffer.byteLength(p) <= 200 && !p.includes('\u0000'),
          verify: (_p, response) => {
            const rowsSeen = response.json<unknown[]>();
            return Promise.resolve(
              rowsSeen.length === 0
                ? undefined
                : `audit for a made-up consumer returned ${rowsSeen.length} rows`,
            );
          },
        },
        {
          id: 'body eventId (skip)',
          baseline: ['9007199254740992'],
          build: (p) => post('/consumers/mailer/skip', { eventId: p }),
        },
        {
          id: 'body eventId (fence)',
          baseline: ['9007199254740992'],
          build: (p) => post('/consumers/mailer/fence', { eventId: p }),
        },
        {
          id: 'body from (restart)',
          baseline: ['9223372036854775807'],
          build: (p) => post('/consumers/mailer/restart', { from: p }),
        },
        {
          id: 'body reason (disable)',
          baseline: ['a benign reason'],
          build: (p) => post('/consumers/scribe/disable', { reason: p }),
          accepts: storable,
          mayChange: 'scribe',
          verify: async (p) => {
            const [audit] = await db.sql<{ reason: string | null }[]>`
              select details->>'reason' as reason from ${db.sql(`${ops.schema}.audit`)} order by id desc limit 1`;
            const row = await consumerRow(db.sql, ops.schema, 'scribe');
            return audit?.reason === p && row.disabledReason === p
              ? undefined
              : `reason not stored verbatim: audit ${String(audit?.reason).slice(0, 40)}`;
          },
        },
        {
          id: 'body instanceId (skip of the stuck event)',
          baseline: ['nobody'],
          build: (p) => post('/consumers/mailer/skip', { eventId: STUCK.toString(), instanceId: p }),
        },
        {
          id: 'body ids (replay)',
          baseline: ['1'],
          build: (p) => post('/consumers/mailer/dead-letters/replay', { ids: [p], dryRun: true }),
        },
        {
          id: 'body until (disable)',
          baseline: [untilBaseline],
          build: (p) => post('/consumers/scribe/disable', { until: p }),
          mayChange: 'scribe',
        },
        {
          id: 'body forMs (disable)',
          baseline: ['60000'],
          build: (p) => post('/consumers/scribe/disable', { forMs: literal(p) }),
          accepts: (p) => integer(p, 1000, 31_536_000_000),
          mayChange: 'scribe',
        },
        {
          id: 'body dryRun (replay)',
          baseline: ['true'],
          build: (p) => post('/consumers/mailer/dead-letters/replay', { dryRun: literal(p) }),
          accepts: (p) => typeof literal(p) === 'boolean',
        },
        {
          id: 'body limit (replay)',
          baseline: ['5'],
          build: (p) => post('/consumers/mailer/dead-letters/replay', { limit: literal(p), dryRun: true }),
          accepts: (p) => integer(p, 1, 1000),
        },
      ];

      // Connection set-up (postgres.js reads array types on a new connection) is not a request's doing.
      const setup = (s: Statement) => s.text.includes('pg_catalog.pg_type');
      const statusesAll: number[] = [];
      let requests = 0;
      let extra = 0;
      let refusedWithSql = 0;
      let payloadInText = 0;
      let verbatim = 0;
      let reasons = 0;
      const acceptedBy: string[] = [];
      let bound = 0;
      let maxLatencyMs = 0;
      for (const position of positions) {
        // Baseline: the statement texts (templates) a legitimate request of this position sends.
        const templates = new Set<string>();
        let maxStatements = 0;
        for (const value of position.baseline) {
          const { response, statements } = await ops.request(position.build(value));
          expect(response.statusCode, `${position.id} baseline ${value}`).toBeLessThan(500);
          for (const s of statements) templates.add(s.text);
          maxStatements = Math.max(maxStatements, statements.filter((s) => !setup(s)).length);
        }
        const before = await ops.state();
        const before2xx = await scribeExcluded(ops);
        let changedBy2xx = 0;
        for (const payload of corpus) {
          const started = performance.now();
          const { response, statements } = await ops.request(position.build(payload));
          const latency = performance.now() - started;
          maxLatencyMs = Math.max(maxLatencyMs, latency);
          requests++;
          const status = response.statusCode;
          statusesAll.push(status);
          const where = `${position.id} ${JSON.stringify(payload).slice(0, 60)}`;
          const own = statements.filter((s) => !setup(s));
          if (latency > 4000) violations.add(`${where}: answered after ${latency.toFixed(0)} ms`);
          if (status >= 500) {
            violations.add(`${where}: ${status} ${codeOf(response.body)} after ${own.length} statement(s)`);
          } else if (REFUSED.has(status)) {
            if (own.length > 0) {
              refusedWithSql++;
              violations.add(`${where}: ${status} after ${own.length} SQL statement(s)`);
            }
          } else {
            const unknown = own.filter((s) => !templates.has(s.text));
            const beyond = Math.max(0, own.length - maxStatements);
            extra += Math.max(unknown.length, beyond);
            if (unknown.length > 0 || beyond > 0) {
              violations.add(
                `${where}: ${status} sent ${unknown.length} statement(s) outside the templates, ${beyond} beyond the baseline: ${unknown[0]?.text.slice(0, 80) ?? ''}`,
              );
            }
            if (payload.length >= 6 && own.some((s) => s.text.includes(payload))) {
              payloadInText++;
              violations.add(`${where}: the payload is in the SQL text`);
            }
            if (own.some((s) => s.parameters.some((v) => typeof v === 'string' && v.includes(payload))))
              bound++;
            if (status >= 200 && status < 300) {
              acceptedBy.push(position.id);
              if (position.mayChange && position.verify) reasons++;
              if (!position.accepts?.(payload)) violations.add(`${where}: accepted (${status})`);
              const wrong = await position.verify?.(payload, response);
              if (wrong) violations.add(`${where}: ${wrong}`);
              else if (position.verify && position.mayChange) verbatim++;
              if (position.mayChange) changedBy2xx++;
            } else if (![404, 409].includes(status)) {
              violations.add(`${where}: unexpected ${status}`);
            }
          }
        }
        // Rejected requests change nothing; an accepted one only touches scribe's row and audit.
        const after = await ops.state();
        if (changedBy2xx === 0) {
          const changed = differences(before, after);
          if (changed.length > 0) violations.add(`${position.id}: tables changed: ${changed.join(', ')}`);
        } else {
          const after2xx = await scribeExcluded(ops);
          const changed = differences(before2xx, after2xx);
          if (changed.length > 0) violations.add(`${position.id}: tables changed: ${changed.join(', ')}`);
          const audits = Number(after['audit']?.split(':')[0]) - Number(before['audit']?.split(':')[0]);
          if (audits !== changedBy2xx)
            violations.add(`${position.id}: ${audits} audit rows for ${changedBy2xx} actions`);
        }
        await ops.request(post('/consumers/scribe/enable', {}));
      }
      const counts = (from: number, to: number) => statusesAll.filter((s) => s >= from && s < to).length;
      recorder.faults['injection requests'] = requests;
      figures['payloads'] = corpus.length;
      figures['fields'] = positions.length;
      figures['requests'] = requests;
      figures['2xx/4xx/5xx'] = `${counts(200, 300)}/${counts(400, 500)}/${counts(500, 600)}`;
      figures['statuses'] = tally(statusesAll);
      figures['extra statements'] = extra;
      figures['SQL on refused requests'] = refusedWithSql;
      figures['payload in SQL text'] = payloadInText;
      figures['payload bound as a parameter'] = bound;
      figures['accepted (2xx) by field'] = tally(acceptedBy);
      figures['reason stored verbatim'] = `${verbatim}/${reasons}`;
      figures['max latency ms'] = Math.round(maxLatencyMs);
      violations.assertNone('X3');
    });
  });

  test('X4 numeric edges of ids and limits: 400 or exact, never rounded', async () => {
    await recorder.run('X4', 'Numeric edges', ['I10', 'I4'], async (figures) => {
      const violations = new Violations();
      // JSON literals: numbers as written, then the same as strings.
      const numbers = [
        '-1',
        '0',
        '1e3',
        '9007199254740993',
        '9007199254740992',
        '9007199254740991',
        '100000000000000000000',
        '1.0',
        '1.5',
        '-0',
        '1e400',
        'NaN',
        'Infinity',
        '0x10',
        '+1',
        '01',
      ];
      const strings = [
        '-1',
        '0',
        '1e3',
        'NaN',
        'Infinity',
        '9007199254740993',
        '9007199254740992',
        '12345678901234567890',
        '0x10',
        ' 1',
        '1 ',
        '+1',
        '1.0',
        '01',
        '',
        '9223372036854775807',
        '9223372036854775808',
      ].map((s) => JSON.stringify(s));
      const literals = [...numbers, ...strings];

      /** The exact integer a JSON literal denotes (ids: decimal digits only when a string). */
      const exactId = (literal: string): bigint | undefined => {
        if (literal.startsWith('"')) {
          const s = JSON.parse(literal) as string;
          return /^[0-9]+$/.test(s) ? BigInt(s) : undefined;
        }
        return exactNumber(literal);
      };
      /** Counts follow JavaScript's number coercion (Fastify's); exact means no rounding. */
      const exactCount = (literal: string): bigint | undefined => {
        const text = literal.startsWith('"') ? (JSON.parse(literal) as string) : literal;
        if (!literal.startsWith('"')) return exactNumber(literal);
        const n = Number(text);
        return text.trim() !== '' && Number.isSafeInteger(n) ? BigInt(n) : undefined;
      };
      const lastParam = (statements: Statement[], marker: string) => {
        const s = statements.find((x) => x.text.includes(marker));
        const value = s?.parameters[s.parameters.length - 1];
        return typeof value === 'number' || typeof value === 'string' ? BigInt(value) : undefined;
      };
      const idsParam = (statements: Statement[]) => {
        const s = statements.find((x) => x.text.includes('::int8[]'));
        const array = s?.parameters.find((v) => typeof v === 'string' && v.startsWith('{'));
        const match = typeof array === 'string' ? /^\{"?(\d+)"?\}$/.exec(array) : null;
        return match?.[1] === undefined ? undefined : BigInt(match[1]);
      };
      const fromMessage = (response: LightMyRequestResponse, pattern: RegExp) => {
        const m = pattern.exec(response.json<{ message?: string }>().message ?? '');
        return m?.[1] === undefined ? undefined : BigInt(m[1]);
      };

      interface Place {
        readonly id: string;
        readonly request: (literal: string) => InjectOptions;
        readonly exact: (literal: string) => bigint | undefined;
        readonly interpreted: (
          response: LightMyRequestResponse,
          statements: Statement[],
        ) => bigint | undefined;
        readonly skip?: (literal: string) => boolean;
        /** The action changes state when it is accepted (a restart). */
        readonly writes?: boolean;
      }
      const queryValue = (literal: string) => encodeComponent(JSON.parse(literal) as string);
      const onlyStrings = (literal: string) => !literal.startsWith('"');
      const body =
        (path: string, field: string, extra = '') =>
        (literal: string) =>
          post(path, `{"${field}": ${literal}${extra}}`);
      const places: Place[] = [
        {
          id: 'skip eventId',
          request: body('/consumers/mailer/skip', 'eventId'),
          exact: exactId,
          interpreted: (r) =>
            r.statusCode === 409 ? fromMessage(r, /(?:not|skip event) (\d+)/) : fromMessage(r, /event (\d+)/),
          // Skipping the stuck event for real is X7's (racer); here it would un-stick mailer.
          skip: (literal) => literal === `"${STUCK}"`,
        },
        {
          id: 'restart from',
          request: body('/consumers/rewinder/restart', 'from'),
          exact: exactId,
          writes: true,
          interpreted: (r) =>
            r.statusCode === 200
              ? BigInt(r.json<{ cursorAfter: string }>().cursorAfter)
              : fromMessage(r, /restart from (\d+)/),
        },
        {
          id: 'replay ids',
          request: (literal) =>
            post('/consumers/mailer/dead-letters/replay', `{"ids": [${literal}], "dryRun": true}`),
          exact: exactId,
          interpreted: (_r, statements) => idsParam(statements),
        },
        {
          id: 'replay limit',
          request: body('/consumers/mailer/dead-letters/replay', 'limit', ', "dryRun": true'),
          exact: exactCount,
          interpreted: (_r, statements) => lastParam(statements, 'order by d.id limit'),
        },
        {
          id: 'dead-letters ?limit',
          request: (literal) => get(`/consumers/mailer/dead-letters?limit=${queryValue(literal)}`),
          exact: exactCount,
          skip: onlyStrings,
          interpreted: (_r, statements) => lastParam(statements, 'order by d.id desc limit'),
        },
        {
          id: 'audit ?limit',
          request: (literal) => get(`/audit?limit=${queryValue(literal)}`),
          exact: exactCount,
          skip: onlyStrings,
          interpreted: (_r, statements) => lastParam(statements, 'order by a.id desc limit'),
        },
      ];
      let cases = 0;
      let rejected = 0;
      let exactAccepted = 0;
      let coerced = 0;
      let inexact = 0;
      let changes = 0;
      const statuses: number[] = [];
      for (const place of places) {
        for (const literal of literals) {
          if (place.skip?.(literal)) continue;
          cases++;
          const before = await ops.state();
          const { response, statements } = await ops.request(place.request(literal));
          const status = response.statusCode;
          statuses.push(status);
          const where = `${place.id} ${literal}`;
          if (status !== 200 || !place.writes) {
            const changed = differences(before, await ops.state());
            if (changed.length > 0) {
              changes++;
              violations.add(`${where}: ${status} but changed ${changed.join(', ')}`);
            }
          }
          if (status === 400) {
            rejected++;
            if (statements.length > 0)
              violations.add(`${where}: 400 after ${statements.length} statement(s)`);
            continue;
          }
          // A replay of a dead-letter id the consumer does not have is refused whole: 404.
          const notFound = status === 404 && codeOf(response.body) === 'SLUICE_DEAD_LETTER_NOT_FOUND';
          if (status !== 200 && status !== 409 && !notFound) {
            violations.add(`${where}: ${status} ${codeOf(response.body)}`);
            continue;
          }
          const exact = place.exact(literal);
          const got = place.interpreted(response, statements);
          if (exact === undefined || got !== exact) {
            inexact++;
            violations.add(`${where}: ${status}, acted on ${String(got)}, exact value ${String(exact)}`);
          } else {
            exactAccepted++;
            const canonical = literal.startsWith('"') ? (JSON.parse(literal) as string) : literal;
            if (canonical !== exact.toString()) coerced++;
          }
        }
      }
      recorder.faults['numeric edge requests'] = cases;
      figures['cases'] = cases;
      figures['statuses'] = tally(statuses);
      figures['400'] = rejected;
      figures['accepted exact'] = exactAccepted;
      figures['of which coerced (e.g. 1e3, 0x10 as a limit)'] = coerced;
      figures['inexact / precision loss'] = inexact;
      figures['state changes by refused requests'] = changes;
      violations.assertNone('X4');
    });
  });

  test('X5 body tricks on write routes: 400/413/415, validation never bypassed', async () => {
    await recorder.run('X5', 'Body tricks', ['I10'], async (figures) => {
      const violations = new Violations();
      const right = STUCK.toString();
      const wrong = FIRST.toString();
      const deepArray = (depth: number) => `${'['.repeat(depth)}${']'.repeat(depth)}`;
      const deepObject = (depth: number) => `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`;
      const utf7 = '+AHsAIg-eventId+ACIAOgAi-9007199254740993+ACIAfQ-';
      const multipart = `--x\r\nContent-Disposition: form-data; name="eventId"\r\n\r\n${right}\r\n--x--\r\n`;
      type Case = [
        label: string,
        path: string,
        contentType: string | undefined,
        payload: string | Buffer,
        allowed: number[],
      ];
      const skip = '/consumers/mailer/skip';
      const restart = '/consumers/mailer/restart';
      const cases: Case[] = [
        [
          'application/json\\t; with the wrong event',
          skip,
          'application/json\t;',
          `{"eventId":"${wrong}"}`,
          [400, 409, 415],
        ],
        [
          'application/json\\t; with a bad id',
          skip,
          'application/json\t;',
          `{"eventId":"${right} "}`,
          [400, 415],
        ],
        [
          'APPLICATION/JSON with the wrong event',
          skip,
          'APPLICATION/JSON',
          `{"eventId":"${wrong}"}`,
          [400, 409, 415],
        ],
        [
          'APPLICATION/JSON with an unsafe number',
          skip,
          'APPLICATION/JSON',
          `{"eventId":${right}}`,
          [400, 415],
        ],
        [
          'Application/Json; Charset=UTF-8, unsafe number',
          skip,
          'Application/Json; Charset=UTF-8',
          `{"eventId":${right}}`,
          [400, 415],
        ],
        [
          'charset=utf-7 with the wrong event',
          skip,
          'application/json; charset=utf-7',
          `{"eventId":"${wrong}"}`,
          [400, 409, 415],
        ],
        ['charset=utf-7 with a UTF-7 body', skip, 'application/json; charset=utf-7', utf7, [400, 415]],
        [
          'charset=utf-16le with a UTF-16 body',
          skip,
          'application/json; charset=utf-16le',
          Buffer.from(`{"eventId":"${right}"}`, 'utf16le'),
          [400, 415],
        ],
        ['text/plain with JSON', skip, 'text/plain', `{"eventId":"${right}"}`, [400, 415]],
        [
          'text/plain; charset=utf-8 with JSON',
          skip,
          'text/plain; charset=utf-8',
          `{"eventId":"${right}"}`,
          [400, 415],
        ],
        ['form-urlencoded', skip, 'application/x-www-form-urlencoded', `eventId=${right}`, [400, 415]],
        ['multipart', skip, 'multipart/form-data; boundary=x', multipart, [400, 415]],
        [
          'no content type with a JSON body',
          skip,
          undefined,
          Buffer.from(`{"eventId":"${right}"}`),
          [400, 415],
        ],
        ['application/vnd.api+json', skip, 'application/vnd.api+json', `{"eventId":"${right}"}`, [400, 415]],
        [
          'body over 1 MiB',
          skip,
          'application/json',
          `{"eventId":"${right}","reason":"${'x'.repeat(1_100_000)}"}`,
          [400, 413],
        ],
        [
          '__proto__ carrying the event',
          skip,
          'application/json',
          `{"__proto__":{"eventId":"${right}"}}`,
          [400],
        ],
        [
          '__proto__ next to the wrong event',
          skip,
          'application/json',
          `{"eventId":"${wrong}","__proto__":{"eventId":"${right}"}}`,
          [400],
        ],
        [
          'constructor.prototype',
          skip,
          'application/json',
          `{"constructor":{"prototype":{"eventId":"${right}"}}}`,
          [400],
        ],
        [
          'duplicate keys, the wrong one last',
          skip,
          'application/json',
          `{"eventId":"${right}","eventId":"${wrong}"}`,
          [400, 409],
        ],
        [
          'deeply nested array (10,000) as the reason',
          skip,
          'application/json',
          `{"eventId":"${right}","reason":${deepArray(10_000)}}`,
          [400],
        ],
        [
          'deeply nested object (10,000) beside the wrong event',
          skip,
          'application/json',
          `{"eventId":"${wrong}","x":${deepObject(10_000)}}`,
          [400, 409],
        ],
        [
          'nested array (100) as the reason',
          skip,
          'application/json',
          `{"eventId":"${right}","reason":${deepArray(100)}}`,
          [400],
        ],
        ['BOM before the wrong event', skip, 'application/json', `\ufeff{"eventId":"${wrong}"}`, [400, 409]],
        ['a comment in JSON', skip, 'application/json', `{"eventId": /* x */ "${right}"}`, [400]],
        ['trailing garbage', skip, 'application/json', `{"eventId":"${right}"} x`, [400]],
        ['empty body', skip, 'application/json', '', [400]],
        ['null body', skip, 'application/json', 'null', [400]],
        ['array body', skip, 'application/json', `[{"eventId":"${right}"}]`, [400]],
        [
          'JSON string holding JSON',
          skip,
          'application/json',
          JSON.stringify(`{"eventId":"${right}"}`),
          [400],
        ],
        [
          'eventId as a one-item array of the wrong event',
          skip,
          'application/json',
          `{"eventId":["${wrong}"]}`,
          [400, 409],
        ],
        ['eventId as two items', skip, 'application/json', `{"eventId":["${right}","${wrong}"]}`, [400]],
        ['eventId as an object', skip, 'application/json', `{"eventId":{"toString":"${right}"}}`, [400]],
        ['eventId true', skip, 'application/json', '{"eventId":true}', [400]],
        ['eventId with a NUL', skip, 'application/json', `{"eventId":"${right}\\u0000"}`, [400]],
        [
          'gzip without content-encoding support',
          skip,
          'application/json',
          gzipSync(`{"eventId":"${right}"}`),
          [400, 415],
        ],
        ['restart: text/plain', restart, 'text/plain', '{"from":"0"}', [400, 415]],
        ['restart: no content type', restart, undefined, Buffer.from('{"from":"0"}'), [400, 415]],
        ['restart: form-urlencoded', restart, 'application/x-www-form-urlencoded', 'from=0', [400, 415]],
        ['restart: __proto__', restart, 'application/json', '{"__proto__":{"from":"0"}}', [400]],
        [
          'restart: constructor.prototype',
          restart,
          'application/json',
          '{"constructor":{"prototype":{"from":"0"}}}',
          [400],
        ],
        [
          'restart: UTF-7',
          restart,
          'application/json; charset=utf-7',
          '+AHsAIg-from+ACIAOgAi-0+ACIAfQ-',
          [400, 415],
        ],
        [
          'restart: deeply nested reason',
          restart,
          'application/json',
          `{"from":"0","reason":${deepArray(10_000)}}`,
          [400],
        ],
        ['restart: from with a space', restart, 'application/json', '{"from":"0 "}', [400]],
      ];
      const statuses: number[] = [];
      let bypasses = 0;
      let changes = 0;
      let sqlOnRefused = 0;
      for (const [label, path, contentType, payload, allowed] of cases) {
        const before = await ops.state();
        const headers: Record<string, string> = { ...AUTH };
        if (contentType !== undefined) headers['content-type'] = contentType;
        if (label.startsWith('gzip')) headers['content-encoding'] = 'gzip';
        const { response, statements } = await ops.request({
          method: 'POST',
          url: `${PREFIX}${path}`,
          headers,
          payload,
        });
        const status = response.statusCode;
        statuses.push(status);
        if (status >= 200 && status < 300) bypasses++;
        if (!allowed.includes(status)) violations.add(`${label}: ${status} ${codeOf(response.body)}`);
        if (REFUSED.has(status) && statements.length > 0) {
          sqlOnRefused++;
          violations.add(`${label}: ${status} after ${statements.length} statement(s)`);
        }
        const changed = differences(before, await ops.state());
        if (changed.length > 0) {
          changes++;
          violations.add(`${label}: changed ${changed.join(', ')}`);
        }
      }
      const mailer = await consumerRow(db.sql, ops.schema, 'mailer');
      if (mailer.status !== 'dead' || mailer.stuckEventId !== STUCK) violations.add('mailer was un-stuck');
      recorder.faults['body tricks'] = cases.length;
      figures['cases'] = cases.length;
      figures['statuses'] = tally(statuses);
      figures['bypasses (2xx)'] = bypasses;
      figures['5xx'] = statuses.filter((s) => s >= 500).length;
      figures['SQL on refused requests'] = sqlOnRefused;
      figures['state changes'] = changes;
      violations.assertNone('X5');
    });
  });

  test('X8 a cross-site form POST with valid Basic credentials to every write route: 403/415, nothing changes', async () => {
    await recorder.run('X8', 'Cross-site form POST', ['I10'], async (figures) => {
      const violations = new Violations();
      const writes = ops.routes.filter(
        (r) => r.url.startsWith(`${PREFIX}/`) && (r.write || !['GET', 'HEAD'].includes(r.method)),
      );
      expect(writes.length).toBe(14);
      if (writes.some((r) => !r.write)) violations.add('a write method on a route not marked as a write');

      /** The forms a page on another site can make a browser submit, as browsers encode them. */
      const forms = (fields: Record<string, string>): [string, string | undefined, string][] => {
        const boundary = '----sluiceX8boundary';
        const parts = Object.entries(fields).map(
          ([k, v]) => `--${boundary}\r\nContent-Disposition: form-data; name="${k}"\r\n\r\n${v}\r\n`,
        );
        // enctype=text/plain sends `name=value`: a name ending in `"x":"` and a value `"}` make JSON.
        const json = `${JSON.stringify(fields).slice(0, -1)},"x":"="}`;
        return [
          ['form', 'application/x-www-form-urlencoded', new URLSearchParams(fields).toString()],
          ['empty form', 'application/x-www-form-urlencoded', ''],
          [
            'multipart form',
            `multipart/form-data; boundary=${boundary}`,
            `${parts.join('')}--${boundary}--\r\n`,
          ],
          ['text/plain form carrying JSON', 'text/plain', `${json}\r\n`],
          ['fetch no-cors without a body', undefined, ''],
        ];
      };
      /** What browsers send about where a request comes from, and the status each must get. */
      const browsers: [string, Record<string, string>, number][] = [
        [
          'current browser',
          {
            origin: 'https://evil.example',
            'sec-fetch-site': 'cross-site',
            'sec-fetch-mode': 'navigate',
            'sec-fetch-dest': 'document',
          },
          403,
        ],
        [
          'sibling subdomain',
          {
            origin: 'http://blog.localhost',
            'sec-fetch-site': 'same-site',
            'sec-fetch-mode': 'navigate',
          },
          403,
        ],
        ['plain HTTP (Origin only)', { origin: 'http://evil.example' }, 403],
        ['sandboxed frame', { origin: 'null', 'sec-fetch-site': 'cross-site' }, 403],
        ['headers stripped by a proxy or an old browser', {}, 415],
      ];

      // The host's own parsers, on a route of the host: which of these forms do they make fields of?
      // (With one of them the ops routes' checks are all that stands between the form and the action.)
      const parsed: string[] = [];
      for (const [encoding, contentType, body] of forms({ from: 'now' })) {
        if (contentType === undefined) continue;
        const echo = await ops.http({
          method: 'POST',
          path: ECHO,
          headers: { 'content-type': contentType },
          body,
        });
        if (echo.status === 200 && echo.body.includes('"from":"now"')) parsed.push(encoding);
      }
      const expectedParsed = { bare: [], formbody: ['form'], multipart: ['multipart form'] }[host];
      if (parsed.join() !== expectedParsed.join()) {
        violations.add(`the ${host} host parses ${parsed.join(', ') || 'no form'}`);
      }

      const statuses: number[] = [];
      let requests = 0;
      let bypasses = 0;
      let sqlOnRefused = 0;
      let cacheable = 0;
      const changedRoutes: string[] = [];
      for (const route of writes) {
        const path = route.url.replace(':name', 'mailer').replace(':version', '1');
        // The fields that move mailer's cursor, un-stick it or force a takeover, where the route
        // takes them.
        const fields = Object.fromEntries(
          Object.entries({
            from: 'now',
            eventId: STUCK.toString(),
            force: 'true',
            dropSource: 'true',
            reason: 'csrf',
          }).filter(([field]) => route.bodyFields.includes(field)),
        );
        const before = await ops.state();
        for (const [encoding, contentType, body] of forms(fields)) {
          for (const [browser, headers, expected] of browsers) {
            const {
              status,
              headers: answer,
              body: answerBody,
              statements,
            } = await ops.http({
              method: route.method,
              path,
              headers: {
                ...BASIC,
                ...headers,
                ...(contentType === undefined ? {} : { 'content-type': contentType }),
                'content-length': String(Buffer.byteLength(body)),
              },
              body,
            });
            requests++;
            statuses.push(status);
            const where = `${route.method} ${path} (${encoding}, ${browser})`;
            if (status >= 200 && status < 300) bypasses++;
            if (status !== expected)
              violations.add(`${where}: ${status} ${codeOf(answerBody)}, expected ${expected}`);
            if (REFUSED.has(status) && statements.length > 0) {
              sqlOnRefused++;
              violations.add(`${where}: ${status} after ${statements.length} SQL statement(s)`);
            }
            if (answer['cache-control'] !== 'no-store') {
              cacheable++;
              violations.add(`${where}: Cache-Control ${String(answer['cache-control'])}`);
            }
          }
        }
        const changed = differences(before, await ops.state());
        if (changed.length > 0) {
          changedRoutes.push(route.url);
          violations.add(`${route.url}: changed ${changed.join(', ')}`);
        }
      }
      const mailer = await consumerRow(db.sql, ops.schema, 'mailer');
      if (mailer.status !== 'dead' || mailer.stuckEventId !== STUCK) violations.add('mailer was un-stuck');
      recorder.faults['cross-site form requests'] = requests;
      figures['forms the host app parses'] = parsed.join(', ') || 'none';
      figures['write routes'] = writes.length;
      figures['encodings × browsers'] = `${forms({}).length} × ${browsers.length}`;
      figures['requests'] = requests;
      figures['statuses'] = tally(statuses);
      figures['bypasses (2xx)'] = bypasses;
      figures['SQL on refused requests'] = sqlOnRefused;
      figures['routes whose state changed'] = changedRoutes.length;
      figures['responses without no-store'] = cacheable;
      violations.assertNone('X8');
    });
  });

  test('X9 every ops response, authenticated or not, is Cache-Control: no-store', async () => {
    await recorder.run('X9', 'No caching of ops responses', ['no-store'], async (figures) => {
      const violations = new Violations();
      const opsRoutes = ops.routes.filter((r) => r.url === PREFIX || r.url.startsWith(`${PREFIX}/`));
      const requests: { method: string; path: string; headers: Record<string, string>; body?: string }[] = [];
      for (const route of opsRoutes) {
        const path = route.url.replace(':name', 'rewinder').replace(':version', '1');
        const writes = route.method === 'POST';
        // rewinder: restarted to now, disabled then enabled, a skip and a fence that are 409, a replay.
        const body = JSON.stringify(
          Object.fromEntries(
            Object.entries({ from: 'now', eventId: '1' }).filter(([f]) => route.bodyFields.includes(f)),
          ),
        );
        for (const credentials of [BASIC, AUTH, {}, { authorization: `Bearer ${TOKEN}x` }]) {
          requests.push({
            method: route.method,
            path,
            headers: { ...credentials, ...(writes ? { 'content-type': 'application/json' } : {}) },
            ...(writes ? { body } : {}),
          });
        }
      }
      const json = { ...BASIC, 'content-type': 'application/json' };
      requests.push(
        { method: 'GET', path: `${PREFIX}/consumers/nobody`, headers: BASIC },
        { method: 'GET', path: `${PREFIX}/nope`, headers: BASIC },
        { method: 'GET', path: `${PREFIX}/audit?limit=0`, headers: BASIC },
        { method: 'POST', path: `${PREFIX}/consumers/rewinder/skip`, headers: json, body: '{"eventId":"x"}' },
        { method: 'POST', path: `${PREFIX}/consumers/rewinder/skip`, headers: json, body: '{"eventId":' },
        {
          method: 'POST',
          path: `${PREFIX}/consumers/rewinder/enable`,
          headers: { ...json, origin: 'https://evil.example' },
          body: '{}',
        },
        {
          method: 'POST',
          path: `${PREFIX}/consumers/rewinder/enable`,
          headers: { ...BASIC, 'content-type': 'text/plain' },
          body: '{}',
        },
      );
      const statuses: number[] = [];
      let missing = 0;
      for (const request of requests) {
        const { status, headers } = await ops.http(request);
        statuses.push(status);
        if (status >= 500) violations.add(`${request.method} ${request.path}: ${status}`);
        if (headers['cache-control'] !== 'no-store') {
          missing++;
          violations.add(
            `${request.method} ${request.path} → ${status}: Cache-Control ${String(headers['cache-control'])}`,
          );
        }
      }
      const authenticated = statuses.filter((s) => s !== 401).length;
      recorder.faults['no-store checks'] = requests.length;
      figures['routes (method+path)'] = opsRoutes.length;
      figures['responses'] = requests.length;
      figures['authenticated responses'] = authenticated;
      figures['statuses'] = tally(statuses);
      figures['without no-store'] = missing;
      violations.assertNone('X9');
    });
  });

  // Races of the admin actions: they do not depend on the host's parsers, so once.
  if (host === 'bare') {
    test('X7 concurrent skips of the stuck event: exactly one applies; a stale id is 409', async () => {
      await recorder.run('X7', 'Skip race', ['I4', 'I5'], async (figures) => {
        const skipOf = (eventId: bigint) => () =>
          ops.app.inject(post('/consumers/racer/skip', { eventId: eventId.toString(), reason: 'race' }));
        const race = async (n: number, eventId: bigint) => {
          const responses = await Promise.all(Array.from({ length: n }, skipOf(eventId)));
          return responses.map((r) => r.statusCode).sort((a, b) => a - b);
        };
        const counts = async () => {
          const [row] = await db.sql<{ audits: number; letters: number }[]>`
          select (select count(*)::int from ${db.sql(`${ops.schema}.audit`)} where action = 'skip' and consumer_name = 'racer') as audits,
                 (select count(*)::int from ${db.sql(`${ops.schema}.dead_letters`)} where consumer_name = 'racer') as letters`;
          return row;
        };
        recorder.faults['concurrent skips'] = 12;
        const two = await race(2, STUCK);
        figures['2 concurrent: 200/409'] =
          `${two.filter((s) => s === 200).length}/${two.filter((s) => s === 409).length}`;
        expect(two).toEqual([200, 409]);
        expect(await counts()).toEqual({ audits: 1, letters: 1 });

        // The next turn passes the skipped event, delivers the next one and dies on the second poison.
        await ops.app.sluice.dispatcher.runOnce();
        expect(await consumerRow(db.sql, ops.schema, 'racer')).toMatchObject({
          status: 'dead',
          stuckEventId: SECOND_POISON,
        });
        const ten = await race(10, SECOND_POISON);
        figures['10 concurrent: 200/409'] =
          `${ten.filter((s) => s === 200).length}/${ten.filter((s) => s === 409).length}`;
        expect(ten).toEqual([200, ...Array<number>(9).fill(409)]);

        const stale = await skipOf(STUCK)();
        figures['stale expected id'] = stale.statusCode;
        expect(stale.statusCode).toBe(409);
        expect(stale.json()).toMatchObject({ code: 'SLUICE_SKIP_MISMATCH' });
        const final = await counts();
        figures['audit rows'] = final?.audits ?? -1;
        figures['dead letters'] = final?.letters ?? -1;
        expect(final).toEqual({ audits: 2, letters: 2 });
        const letters = await db.sql<{ event_id: string }[]>`
        select event_id::text from ${db.sql(`${ops.schema}.dead_letters`)} where consumer_name = 'racer' order by id`;
        expect(letters.map((l) => l.event_id)).toEqual([STUCK.toString(), SECOND_POISON.toString()]);
      });
    });

    test('R4 an admin action against a long turn: 409 within lockTimeout, or waits and is never undone', async () => {
      await recorder.run('R4', 'Admin op vs long turn', ['I4', 'I10'], async (figures: Figures) => {
        let release: () => void = () => undefined;
        let entered: () => void = () => undefined;
        let opened = Promise.resolve();
        let inside = Promise.resolve();
        const arm = () => {
          opened = new Promise((resolve) => (release = resolve));
          inside = new Promise((resolve) => (entered = resolve));
        };
        const slowpoke: Consumer = {
          name: 'slowpoke',
          handler: async (event) => {
            if (event.data['block'] === true) {
              entered();
              await opened;
            }
          },
        };
        const LOCK_MS = 300;
        const quick = await buildOpsApp(db, {
          consumers: [slowpoke],
          lockTimeoutMs: LOCK_MS,
          handlerTimeoutMs: 20_000,
        });
        const patient = await buildOpsApp(db, {
          consumers: [slowpoke],
          schema: quick.schema,
          lockTimeoutMs: 10_000,
        });
        /** Resolves once an operator action waits for the row the blocked turn holds. */
        const untilWaitingForTheRow = () =>
          until(
            async () =>
              (
                await db.sql`
                  select 1 from pg_stat_activity
                  where wait_event_type = 'Lock' and state = 'active' and query like '%for update of c%'`
              ).length > 0,
            10_000,
            'the operator action to wait for the row',
          );
        try {
          const block = () =>
            appendEvents(
              db.sql,
              1,
              () => ({ streamId: 'r4', type: 'Slow', data: { block: true } }),
              quick.schema,
            );

          // 1. A turn blocks inside its handler, holding the row.
          arm();
          const [first] = await block();
          const turn = quick.app.sluice.dispatcher.runOnce();
          await inside;
          const before = await quick.state();
          const busy: number[] = [];
          for (const [action, payload] of [
            ['disable', { reason: 'maintenance' }],
            ['restart', { from: 'beginning' }],
          ] as const) {
            const started = performance.now();
            const response = await quick.app.inject(post(`/consumers/slowpoke/${action}`, payload));
            const ms = performance.now() - started;
            busy.push(Math.round(ms));
            expect(response.statusCode, response.body).toBe(409);
            expect(response.json()).toMatchObject({ code: 'SLUICE_CONSUMER_BUSY' });
            expect(ms).toBeGreaterThanOrEqual(LOCK_MS - 20);
            expect(ms).toBeLessThanOrEqual(LOCK_MS + 700);
          }
          const changed = differences(before, await quick.state());
          figures['lockTimeoutMs'] = LOCK_MS;
          figures['409 SLUICE_CONSUMER_BUSY after ms (disable, restart)'] = busy.join(', ');
          figures['changes by refused actions'] = changed.length;
          expect(changed).toEqual([]);

          // 2. With a longer lock timeout the action waits for the turn, then applies on top of it.
          let settled = false;
          const waiting = patient.app.inject(
            post('/consumers/slowpoke/disable', { reason: 'after the turn' }),
          );
          void waiting.finally(() => (settled = true));
          const waitStarted = performance.now();
          await untilWaitingForTheRow();
          expect(settled).toBe(false);
          release();
          await turn;
          const disabled = await waiting;
          figures['waiting disable applied after ms'] = Math.round(performance.now() - waitStarted);
          expect(disabled.statusCode, disabled.body).toBe(200);
          expect(disabled.json()).toMatchObject({
            cursorBefore: first!.id.toString(),
            statusAfter: 'disabled',
          });
          expect(await consumerRow(db.sql, quick.schema, 'slowpoke')).toMatchObject({
            status: 'disabled',
            cursor: first!.id,
          });

          // 3. The same for a restart: the turn commits its cursor, then the operator's cursor wins.
          await patient.app.inject(post('/consumers/slowpoke/enable', {}));
          arm();
          const [second] = await block();
          const turn2 = quick.app.sluice.dispatcher.runOnce();
          await inside;
          const restarting = patient.app.inject(post('/consumers/slowpoke/restart', { from: '0' }));
          await untilWaitingForTheRow();
          release();
          await turn2;
          const restarted = await restarting;
          expect(restarted.statusCode, restarted.body).toBe(200);
          expect(restarted.json()).toMatchObject({ cursorBefore: second!.id.toString(), cursorAfter: '0' });
          await quick.app.sluice.dispatcher.drain();
          const final = await consumerRow(db.sql, quick.schema, 'slowpoke');
          figures['operator state kept after the turn'] = `status ${final.status}, cursor ${final.cursor}`;
          expect(final).toMatchObject({ status: 'idle', cursor: 0n });
        } finally {
          release();
          await patient.close();
          await quick.close();
        }
      });
    });
  }
});

/** The error code of a response body (or its start, when it is not an ops error). */
function codeOf(body: string): string {
  try {
    const parsed = JSON.parse(body) as { code?: unknown };
    if (typeof parsed.code === 'string') return parsed.code;
  } catch {
    // Not JSON: show the start.
  }
  return body.slice(0, 80);
}

/** Every table's digest, leaving out scribe's consumer row and audit rows (X3's accepted writes). */
async function scribeExcluded(ops: OpsApp): Promise<TableState> {
  const { schema } = ops;
  const [row] = await db.sql<{ consumers: string; audit: string }[]>`
    select (select md5(string_agg(c::text, '|' order by c::text)) from ${db.sql(`${schema}.consumers`)} c
            where c.name <> 'scribe') as consumers,
           (select coalesce(md5(string_agg(a::text, '|' order by a::text)), '') from ${db.sql(`${schema}.audit`)} a
            where a.consumer_name is distinct from 'scribe') as audit`;
  const all = await ops.state();
  return { ...all, consumers: row?.consumers ?? '', audit: row?.audit ?? '' };
}

/** The exact integer a JSON number literal denotes, or undefined (not an integer, not JSON). */
function exactNumber(literal: string): bigint | undefined {
  const m = /^(-)?(0|[1-9][0-9]*)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?$/.exec(literal);
  if (!m) return undefined;
  const [, sign, whole = '', fraction = '', exponent = '0'] = m;
  const power = Number(exponent) - fraction.length;
  if (Math.abs(power) > 400) return undefined;
  const digits = BigInt(whole + fraction);
  let value: bigint;
  if (power >= 0) value = digits * 10n ** BigInt(power);
  else {
    const divisor = 10n ** BigInt(-power);
    if (digits % divisor !== 0n) return undefined;
    value = digits / divisor;
  }
  return sign ? -value : value;
}

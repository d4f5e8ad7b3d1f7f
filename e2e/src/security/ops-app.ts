// A real Fastify app with the Sluice plugin and its ops routes, on its own schema of the test
// database, whose pool records every statement it sends (postgres.js `debug`): the security suite
// counts the SQL each request causes and compares table states around it. The host app is bare
// Fastify, or registers a body parser many apps do (a form parser, a multipart parser putting the
// fields on the body) before the plugin, so the ops routes' context would inherit it.
import { randomBytes } from 'node:crypto';
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import formbody from '@fastify/formbody';
import multipart from '@fastify/multipart';
import { migrate, silentLogger, type Consumer, type Sql } from '@sluice/core';
import sluice, { basicAuth, bearerAuth, type OpsAuth } from '@sluice/fastify';
import type { TestDatabase } from '@sluice/testing/vitest';
import Fastify, { type FastifyInstance, type InjectOptions, type LightMyRequestResponse } from 'fastify';

export const TOKEN = 'sluice-security-suite-token-0123456789';
export const AUTH = { authorization: `Bearer ${TOKEN}` } as const;
/** The dashboard's operator: the Basic credentials a browser caches and sends on every request. */
export const OPERATOR = { username: 'operator', password: 'security-suite-operator-password' } as const;
export const BASIC = {
  authorization: `Basic ${Buffer.from(`${OPERATOR.username}:${OPERATOR.password}`).toString('base64')}`,
} as const;
export const PREFIX = '/sluice';
/** A host route that answers with the body the host's parsers made of a request. */
export const ECHO = '/host/echo';

/** The host app around the plugin: bare Fastify, or with a body parser registered first. */
export type HostKind = 'bare' | 'formbody' | 'multipart';

/** One statement the app's pool sent: its text (placeholders, never values) and bound parameters. */
export interface Statement {
  readonly text: string;
  readonly parameters: readonly unknown[];
}

export interface RegisteredRoute {
  readonly method: string;
  readonly url: string;
  /** The route is marked `config.write` (the ops routes' write actions). */
  readonly write: boolean;
  /** The properties of the route's body schema. */
  readonly bodyFields: readonly string[];
  /** The route is part of the dashboard's page shell (`config.shell`: no data). */
  readonly shell: boolean;
}

export interface OpsApp {
  readonly app: FastifyInstance;
  readonly schema: string;
  /** The app's pool (dispatcher, admin and ops routes all use it). */
  readonly sql: Sql;
  /** Every statement the app's pool has sent, in order. */
  readonly statements: Statement[];
  /** Every route of the app, from an onRoute hook (HEAD routes included). */
  readonly routes: RegisteredRoute[];
  /** Sends a request and returns the response with the statements it caused. */
  request(options: InjectOptions): Promise<{ response: LightMyRequestResponse; statements: Statement[] }>;
  /**
   * Sends a request over a real socket with the path exactly as given: no client-side URL
   * normalisation (light-my-request, like browsers, turns `%2E%2E` into a dot segment).
   */
  http(options: RawRequest): Promise<RawResponse>;
  /** A digest of every Sluice table (read on another pool: never counted). */
  state(): Promise<TableState>;
  close(): Promise<void>;
}

export type TableState = Readonly<Record<string, string>>;

export interface RawResponse {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
  readonly statements: Statement[];
}

export interface RawRequest {
  readonly method: string;
  readonly path: string;
  readonly headers?: Readonly<Record<string, string>>;
  readonly body?: string;
}

export interface OpsAppOptions {
  readonly consumers: readonly Consumer[];
  /** The plugin's ops.lockTimeoutMs. @defaultValue 2_000 */
  readonly lockTimeoutMs?: number;
  /** First event id of the schema's identity (to test ids beyond 2^53). @defaultValue 1 */
  readonly firstId?: bigint;
  /** Reuse a migrated schema (a second app on the same consumers' rows). */
  readonly schema?: string;
  /** Let Fastify's default maxParamLength (100) apply instead of 1000. */
  readonly maxParamLength?: number;
  readonly handlerTimeoutMs?: number;
  /** @defaultValue 'bare' */
  readonly host?: HostKind;
  /**
   * `bearer-or-basic`: the suite's token or the operator's Basic credentials (with a Basic
   * challenge, so the dashboard's page is guarded too); `bearer`: the token only, so the page
   * shell loads without credentials and asks for it.
   * @defaultValue 'bearer-or-basic'
   */
  readonly auth?: 'bearer-or-basic' | 'bearer';
}

export const TABLES = ['events', 'consumers', 'gaps', 'turn_starts', 'dead_letters', 'audit'] as const;

/**
 * Builds the app: migrates a fresh schema (unless given), registers the plugin with the dispatcher
 * quiet (no LISTEN, a one-hour poll: only explicit runOnce() calls deliver, so every statement
 * after boot belongs to a request), and waits for the boot pass to finish.
 */
export async function buildOpsApp(db: TestDatabase, options: OpsAppOptions): Promise<OpsApp> {
  const schema = options.schema ?? `sec_${randomBytes(4).toString('hex')}`;
  if (options.schema === undefined) {
    await migrate(db.sql, { schema, logger: silentLogger });
    if (options.firstId !== undefined) {
      await db.sql.unsafe(`alter table "${schema}".events alter column id restart with ${options.firstId}`);
    }
  }
  const statements: Statement[] = [];
  const sql = db.connect({
    max: 12,
    debug: (_connection: number, text: string, parameters: unknown[]) => {
      statements.push({ text, parameters: [...parameters] });
    },
  });
  // Consumer names may be up to 200 bytes (600 URL characters); Fastify's default is 100.
  const app = Fastify({ logger: false, routerOptions: { maxParamLength: options.maxParamLength ?? 1000 } });
  const routes: RegisteredRoute[] = [];
  app.addHook('onRoute', (route) => {
    const config = route.config as { write?: unknown; shell?: unknown } | undefined;
    const write = config?.write === true;
    const shell = config?.shell === true;
    const body = route.schema?.body as { properties?: object } | undefined;
    const bodyFields = Object.keys(body?.properties ?? {});
    for (const method of [route.method].flat())
      routes.push({ method, url: route.url, write, bodyFields, shell });
  });
  // Registered before the plugin, as an app's own setup usually is: the parsers are the app's.
  if (options.host === 'formbody') await app.register(formbody);
  if (options.host === 'multipart') await app.register(multipart, { attachFieldsToBody: 'keyValues' });
  app.post(ECHO, (request, reply) => reply.send({ body: request.body ?? null }));
  // The suite's clients send a bearer token; a browser sends the operator's Basic credentials.
  const bearer = bearerAuth(TOKEN, 'security-suite');
  const basic = basicAuth(OPERATOR);
  const either: OpsAuth = (request) =>
    request.headers.authorization?.startsWith('Basic ') === true ? basic(request) : bearer(request);
  if (basic.challenge !== undefined) either.challenge = basic.challenge;
  const auth = options.auth === 'bearer' ? bearer : either;
  await app.register(sluice, {
    sql,
    schema,
    consumers: options.consumers,
    listen: false,
    pollIntervalMs: 3_600_000,
    rearmCooldownMs: 3_600_000,
    handlerTimeoutMs: options.handlerTimeoutMs ?? 30_000,
    logger: silentLogger,
    migrate: false,
    ops: { auth, lockTimeoutMs: options.lockTimeoutMs ?? 2_000 },
  });
  await app.ready();
  await app.sluice.dispatcher.drain();

  const t = (table: string) => db.sql(`${schema}.${table}`);
  let port: number | undefined;
  return {
    app,
    schema,
    sql,
    statements,
    routes,
    async request(injectOptions) {
      const from = statements.length;
      const response = await app.inject(injectOptions);
      return { response, statements: statements.slice(from) };
    },
    async http(raw) {
      if (port === undefined) {
        await app.listen({ host: '127.0.0.1', port: 0 });
        port = (app.server.address() as AddressInfo).port;
      }
      const from = statements.length;
      const { status, headers, body } = await new Promise<Omit<RawResponse, 'statements'>>(
        (resolve, reject) => {
          const req = httpRequest(
            {
              host: '127.0.0.1',
              port,
              method: raw.method,
              path: raw.path,
              headers: raw.headers ?? {},
              agent: false,
            },
            (res) => {
              const chunks: Buffer[] = [];
              res.on('data', (chunk: Buffer) => chunks.push(chunk));
              res.on('end', () => {
                resolve({
                  status: res.statusCode ?? 0,
                  headers: res.headers,
                  body: Buffer.concat(chunks).toString('utf8'),
                });
              });
              res.on('error', reject);
            },
          );
          req.on('error', reject);
          req.end(raw.body);
        },
      );
      return { status, headers, body, statements: statements.slice(from) };
    },
    async state() {
      const digest: Record<string, string> = {};
      for (const table of TABLES) {
        const [row] = await db.sql<{ n: number; digest: string | null }[]>`
          select count(*)::int as n, md5(string_agg(x::text, '|' order by x::text)) as digest from ${t(table)} x`;
        digest[table] = `${row?.n ?? 0}:${row?.digest ?? ''}`;
      }
      return digest;
    },
    async close() {
      await app.close();
      await sql.end({ timeout: 5 });
    },
  };
}

/** Rows of a table of the app's schema, read on the unrecorded pool. */
export async function rows<T extends object>(db: TestDatabase, schema: string, table: string): Promise<T[]> {
  return db.sql<T[]>`select * from ${db.sql(`${schema}.${table}`)} order by 1`;
}

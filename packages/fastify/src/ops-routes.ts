import type { FastifyInstance } from 'fastify';
import { dashboardRoutes, shellIsPublic } from './dashboard/dashboard.js';
import { settleWithin, TIMED_OUT } from '@sluice/core/internal';
import { DatabaseSilentError } from './bounded-admin.js';
import { OpsRequestError, sendOpsCode, sendOpsError } from './http-errors.js';
import { malformedEscape } from './json.js';
import { findBodyProblem, findStrictProblem, NO_PARAMETERS } from './json.js';
import { auditRoutes } from './routes/audit.js';
import { consumerRoutes } from './routes/consumers.js';
import type { OpsContext } from './routes/context.js';
import { deadLetterRoutes } from './routes/dead-letters.js';
import { healthRoutes } from './routes/health.js';
import { laneRoutes } from './routes/lanes.js';
import { rebuildRoutes } from './routes/rebuilds.js';
import { crossSiteProblem, unsupportedBodyType, WRITE_METHODS } from './write-guard.js';

/**
 * The ops routes, in an encapsulated context. Order of checks, before any SQL: authentication
 * (onRequest, so an unauthenticated body is never even parsed) → for writes, the request's origin
 * (403), its Content-Type (415) and read-only (405 for write routes), still before the body is
 * read → unsafe JSON numbers, unknown fields and values of another JSON type than the schema's,
 * which the host's Ajv might drop or coerce (400) → schema validation (400) → the admin action.
 * Every response, whatever its status, is marked `Cache-Control: no-store`.
 */
export async function opsRoutes(app: FastifyInstance, context: OpsContext): Promise<void> {
  const { ops } = context;
  // This context inherits the host app's body parsers (a form or multipart parser, a lenient JSON
  // parser): the ops routes parse JSON only, with Fastify's own parser refusing __proto__ and
  // constructor keys whatever the host's onProtoPoisoning says. The Content-Type check below
  // refuses everything else first; this keeps a host's parser from ever seeing an ops body.
  app.removeAllContentTypeParsers();
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const text = body.toString();
    void parseJson(request, text, (error, value) => {
      // Fastify says "not valid JSON" of a body it refused for such a key too: say which it is.
      if (error && isJson(text)) {
        done(
          new OpsRequestError(
            'SLUICE_INVALID_REQUEST',
            'the body has a __proto__ or constructor.prototype key, which the ops routes refuse',
          ),
          undefined,
        );
        return;
      }
      done(error, value);
    });
  });
  app.decorateRequest('sluiceActor', '');
  app.setErrorHandler(sendOpsError);
  // Operator data and actions' results must not stay in a browser's or a proxy's cache.
  app.addHook('onSend', async (_request, reply) => {
    void reply.header('cache-control', 'no-store');
  });
  // Under a prefix of their own, a path no ops route has is answered here (after authentication).
  // At the root ('/'), every path no route has is the host app's: its own not-found handler (or
  // Fastify's), not the ops routes' credentials check and 404.
  if (ops.prefix !== '/') {
    app.setNotFoundHandler((request, reply) =>
      sendOpsCode(reply, 'SLUICE_ROUTE_NOT_FOUND', `No ops route ${request.method} ${request.url}`),
    );
  }

  const publicShell = shellIsPublic(context);
  app.addHook('onRequest', async (request, reply) => {
    if (ops.insecure) {
      // Without credentials, only requests addressed to this machine by name: a page elsewhere
      // whose name was made to resolve to 127.0.0.1 (DNS rebinding) is same-origin to the browser
      // with its own Host, and could otherwise read and act.
      // The Host the browser sent, not Fastify's hostname: with trustProxy, a rebound page (same-origin
      // to its browser) could name localhost in X-Forwarded-Host.
      if (!isLoopbackHost(request.raw.headers.host ?? '')) {
        request.log.info(
          { host: request.headers.host },
          'sluice ops: insecure route asked for by another host',
        );
        return sendOpsCode(
          reply,
          'SLUICE_CROSS_SITE_REQUEST',
          'ops.insecure serves only requests addressed to localhost, 127.0.0.1 or [::1] (the Host header)',
        );
      }
      request.sluiceActor = 'insecure-local';
      return;
    }
    // The dashboard's page shell holds no data; where a browser cannot prompt for credentials it
    // must load without them to ask for the token (dashboard.ts).
    if (publicShell && request.routeOptions.config.shell === true) return;
    let actor: string | false | undefined;
    try {
      actor = await ops.auth?.(request);
    } catch (error) {
      request.log.info({ err: error }, 'sluice ops: authentication failed');
      actor = undefined;
    }
    if (typeof actor !== 'string' || actor === '') {
      const challenge = (ops.auth as { challenge?: unknown } | undefined)?.challenge;
      if (typeof challenge === 'string') void reply.header('www-authenticate', challenge);
      return sendOpsCode(reply, 'SLUICE_UNAUTHORIZED', 'The Sluice ops routes need valid credentials');
    }
    request.sluiceActor = auditableActor(actor);
  });

  // Writes from another site (a form or script on a page an operator visits, riding on the
  // credentials the browser caches) and bodies other than JSON are refused before the body is read.
  app.addHook('onRequest', async (request, reply) => {
    if (request.is404) return; // no such route: its 404, whatever the method
    if (!WRITE_METHODS.has(request.method) && request.routeOptions.config.write !== true) return;
    const crossSite = crossSiteProblem(request, ops.allowedOrigins);
    if (crossSite !== undefined) {
      request.log.info(
        { origin: request.headers.origin, secFetchSite: request.headers['sec-fetch-site'] },
        'sluice ops: cross-site write refused',
      );
      return sendOpsCode(reply, 'SLUICE_CROSS_SITE_REQUEST', crossSite);
    }
    const badType = unsupportedBodyType(request.headers);
    if (badType !== undefined) return sendOpsCode(reply, 'SLUICE_UNSUPPORTED_MEDIA_TYPE', badType);
    // Before the body is read too: a read-only deployment answers 405 to any write, whatever its
    // body (an empty or malformed one included).
    if (ops.readOnly && request.routeOptions.config.write === true) {
      void reply.header('allow', 'GET, HEAD');
      return sendOpsCode(reply, 'SLUICE_READ_ONLY', 'The Sluice ops routes are read-only here');
    }
  });

  app.addHook('preValidation', async (request, reply) => {
    const schema = request.routeOptions.schema;
    const problem =
      malformedEscape(request.raw.url) ??
      findBodyProblem(request.body) ??
      findStrictProblem(
        request.query,
        schema?.querystring ??
          (request.routeOptions.config.write === true || request.method === 'POST'
            ? NO_PARAMETERS
            : undefined),
        'query',
      ) ??
      findStrictProblem(request.body, schema?.body, 'body');
    if (problem !== undefined) {
      return sendOpsCode(reply, 'SLUICE_INVALID_REQUEST', problem);
    }
  });

  // Write actions run at most writeSlots at once; the others wait here, holding no connection, at
  // most ops.requestTimeoutMs (the slots of actions the database does not answer stay taken).
  const writes = slots(context.writeSlots);
  app.addHook('onRoute', (route) => {
    if ((route.config as { write?: boolean } | undefined)?.write !== true) return;
    const handler = route.handler;
    route.handler = async function (this: FastifyInstance, request, reply) {
      const acquiring = writes();
      const acquired = await settleWithin(acquiring, ops.requestTimeoutMs);
      if (acquired === TIMED_OUT) {
        void acquiring.then((release) => {
          release();
        });
        request.log.warn('sluice ops: no write slot within ops.requestTimeoutMs; not carried out');
        return sendOpsCode(
          reply,
          'SLUICE_DATABASE_UNAVAILABLE',
          `earlier actions still wait for the database after ${ops.requestTimeoutMs} ms (ops.requestTimeoutMs); ` +
            'this one was not carried out: try again once it answers',
        );
      }
      let release: (() => void) | undefined = acquired;
      try {
        // Its client went away while it waited for a slot: nobody would learn what it did.
        if (reply.raw.destroyed) {
          request.log.info('sluice ops: the client went away while its write waited; not carried out');
          return await sendOpsCode(
            reply,
            'SLUICE_INTERNAL',
            'the client went away; the action was not carried out',
          );
        }
        return await handler.call(this, request, reply);
      } catch (error) {
        // Answered 503 while its action runs on: the slot (and the connection) stay its own.
        if (error instanceof DatabaseSilentError) {
          const held = release;
          void error.running.finally(held);
          release = undefined;
        }
        throw error;
      } finally {
        release?.();
      }
    };
  });

  consumerRoutes(app, context);
  deadLetterRoutes(app, context);
  laneRoutes(app, context);
  rebuildRoutes(app, context);
  auditRoutes(app, context);
  healthRoutes(app, context);
  dashboardRoutes(app, context);
  await Promise.resolve();
}

/**
 * The authenticated identity as the audit can store it: at most 200 UTF-8 bytes, cut between
 * characters, NULs and unpaired surrogates replaced, so a long or odd name is never a 400.
 */
/**
 * Whether `text` parses as plain JSON (where Fastify's parser refused it for a key). A byte order
 * mark, which Fastify's parser skips, is skipped here too.
 */
function isJson(text: string): boolean {
  try {
    JSON.parse(text.startsWith('\uFEFF') ? text.slice(1) : text);
    return true;
  } catch {
    return false;
  }
}

function auditableActor(actor: string): string {
  let out = '';
  let bytes = 0;
  for (const char of actor) {
    const safe = char === '\u0000' || /\p{Surrogate}/u.test(char) ? '\uFFFD' : char;
    bytes += Buffer.byteLength(safe);
    if (bytes > 200) break;
    out += safe;
  }
  return out;
}

/** A counting semaphore: `acquire()` resolves with its release once one of `size` slots is free. */
function slots(size: number): () => Promise<() => void> {
  let free = Math.max(1, size);
  const waiting: (() => void)[] = [];
  const release = () => {
    const next = waiting.shift();
    if (next) next();
    else free += 1;
  };
  return async () => {
    if (free > 0) free -= 1;
    else await new Promise<void>((resolve) => waiting.push(resolve));
    let released = false;
    return () => {
      if (released) return;
      released = true;
      release();
    };
  };
}

/** A Host header (with or without its port) naming this machine's loopback interface. */
export function isLoopbackHost(hostHeader: string): boolean {
  const host = hostHeader.toLowerCase().replace(/:\d+$/, '').replace(/\.$/, '');
  return host === 'localhost' || host === '[::1]' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

import type { FastifyInstance } from 'fastify';
import { dashboardRoutes } from './dashboard/dashboard.js';
import { errorBody, sendOpsError } from './http-errors.js';
import { findBodyProblem } from './json.js';
import { auditRoutes } from './routes/audit.js';
import { consumerRoutes } from './routes/consumers.js';
import type { OpsContext } from './routes/context.js';
import { deadLetterRoutes } from './routes/dead-letters.js';
import { healthRoutes } from './routes/health.js';

/**
 * The ops routes, in an encapsulated context (CONVENTIONS C8). Order of checks, before any SQL:
 * authentication (onRequest, so an unauthenticated body is never even parsed) → read-only (405 for
 * write routes) → schema validation (400) → unsafe JSON numbers (400) → the admin action.
 */
export async function opsRoutes(app: FastifyInstance, context: OpsContext): Promise<void> {
  const { ops } = context;
  app.decorateRequest('sluiceActor', '');
  app.setErrorHandler(sendOpsError);
  app.setNotFoundHandler((request, reply) =>
    reply
      .code(404)
      .send(errorBody(404, 'SLUICE_ROUTE_NOT_FOUND', `No ops route ${request.method} ${request.url}`)),
  );

  app.addHook('onRequest', async (request, reply) => {
    if (ops.insecure) {
      request.sluiceActor = 'insecure-local';
      return;
    }
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
      return reply
        .code(401)
        .send(errorBody(401, 'SLUICE_UNAUTHORIZED', 'The Sluice ops routes need valid credentials'));
    }
    request.sluiceActor = auditableActor(actor);
  });

  app.addHook('preValidation', async (request, reply) => {
    if (ops.readOnly && request.routeOptions.config.write === true) {
      void reply.header('allow', 'GET, HEAD');
      return reply
        .code(405)
        .send(errorBody(405, 'SLUICE_READ_ONLY', 'The Sluice ops routes are read-only here'));
    }
    const problem = findBodyProblem(request.body);
    if (problem !== undefined) {
      return reply.code(400).send(errorBody(400, 'SLUICE_INVALID_REQUEST', problem));
    }
  });

  consumerRoutes(app, context);
  deadLetterRoutes(app, context);
  auditRoutes(app, context);
  healthRoutes(app, context);
  dashboardRoutes(app, context);
  await Promise.resolve();
}

/**
 * The authenticated identity as the audit can store it: at most 200 UTF-8 bytes, cut between
 * characters, NULs and unpaired surrogates replaced, so a long or odd name is never a 400.
 */
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

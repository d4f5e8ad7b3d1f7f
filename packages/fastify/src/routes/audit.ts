import type { FastifyInstance } from 'fastify';
import { toJson } from '../json.js';
import { auditQuery, auditRecord, errorResponses } from '../schemas.js';
import type { OpsContext } from './context.js';

/** The audit trail, newest first. */
export function auditRoutes(app: FastifyInstance, { admin }: OpsContext): void {
  app.get<{ Querystring: { consumer?: string; limit?: number } }>('/audit', {
    schema: {
      querystring: auditQuery,
      response: { 200: { type: 'array', items: auditRecord }, ...errorResponses },
    },
    handler: async (request) => {
      const { consumer, limit } = request.query;
      return toJson(
        await admin.listAudit({
          ...(consumer === undefined ? {} : { consumer }),
          ...(limit === undefined ? {} : { limit }),
        }),
      );
    },
  });
}

import type { FastifyInstance } from 'fastify';
import { toJson } from '../json.js';
import {
  deadLetter,
  deadLetterParams,
  errorResponses,
  instanceQuery,
  listQuery,
  nameParams,
  replayBody,
  replayResult,
} from '../schemas.js';
import { instanceOf, type OpsContext } from './context.js';
import { redacted } from './redact.js';

interface NameParams {
  name: string;
}

/** Dead letters: list and one by id (payloads redacted), and replay. */
export function deadLetterRoutes(app: FastifyInstance, { admin, ops }: OpsContext): void {
  app.get<{ Params: NameParams; Querystring: { instance?: string; limit?: number } }>(
    '/consumers/:name/dead-letters',
    {
      schema: {
        params: nameParams,
        querystring: listQuery,
        response: { 200: { type: 'array', items: deadLetter }, ...errorResponses },
      },
      handler: async (request) => {
        const { instance, limit } = request.query;
        const letters = await admin.listDeadLetters(request.params.name, {
          ...(instance === undefined ? {} : { instanceId: instance }),
          ...(limit === undefined ? {} : { limit }),
        });
        return toJson(letters.map((letter) => redacted(ops, letter)));
      },
    },
  );

  // Ids are digits only (the schema); one beyond int8 is refused by the admin API (400).
  app.get<{ Params: NameParams & { id: string }; Querystring: { instance?: string } }>(
    '/consumers/:name/dead-letters/:id',
    {
      schema: {
        params: deadLetterParams,
        querystring: instanceQuery,
        response: { 200: deadLetter, ...errorResponses },
      },
      handler: async (request) => {
        const { instance } = request.query;
        const letter = await admin.showDeadLetter(request.params.name, {
          id: BigInt(request.params.id),
          ...(instance === undefined ? {} : { instanceId: instance }),
        });
        return toJson(redacted(ops, letter));
      },
    },
  );

  app.post<{
    Params: NameParams;
    Querystring: { instance?: string };
    Body:
      { ids?: string[]; limit?: number; dryRun?: boolean; instanceId?: string; reason?: string } | undefined;
  }>('/consumers/:name/dead-letters/replay', {
    config: { write: true },
    schema: {
      params: nameParams,
      querystring: {
        type: 'object',
        properties: { instance: nameParams.properties.name },
        additionalProperties: false,
      },
      body: replayBody,
      response: { 200: replayResult, ...errorResponses },
    },
    handler: async (request) => {
      const body = request.body ?? {};
      return toJson(
        await admin.replayDeadLetters(request.params.name, {
          actor: request.sluiceActor,
          ...(body.ids === undefined ? {} : { ids: body.ids.map((id) => BigInt(id)) }),
          ...(body.limit === undefined ? {} : { limit: body.limit }),
          ...(body.dryRun === undefined ? {} : { dryRun: body.dryRun }),
          ...instanceOf(request.query, body),
          ...(body.reason === undefined ? {} : { reason: body.reason }),
        }),
      );
    },
  });
}

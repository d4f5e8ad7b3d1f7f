import type { FastifyInstance } from 'fastify';
import { toJson } from '../json.js';
import {
  errorResponses,
  nameParams,
  parkedEvent,
  parkedEventsQuery,
  parkedKey,
  parkedKeyBody,
  parkedKeyResult,
  parkedKeysQuery,
  relaneBody,
  relaneResult,
} from '../schemas.js';
import type { OpsContext } from './context.js';
import { redacted } from './redact.js';

interface NameParams {
  name: string;
}
interface KeyBody {
  key: string;
  reason?: string;
}

const reasonOf = (body: { reason?: string }) => (body.reason === undefined ? {} : { reason: body.reason });

/**
 * A consumer's parked keys (docs/design.md §11.4): list them, read one key's parked events (payloads
 * redacted as dead letters are), replay or drop a key. A key travels in the query or the body,
 * never in the path: a key is any text, '/' included. And a change of the consumer's lane count
 * (docs/design.md §11.3).
 */
export function laneRoutes(app: FastifyInstance, { admin, ops }: OpsContext): void {
  app.get<{ Params: NameParams; Querystring: { limit?: number } }>('/consumers/:name/parked-keys', {
    schema: {
      params: nameParams,
      querystring: parkedKeysQuery,
      response: { 200: { type: 'array', items: parkedKey }, ...errorResponses },
    },
    handler: async (request) => {
      const { limit } = request.query;
      return toJson(await admin.listParkedKeys(request.params.name, limit === undefined ? {} : { limit }));
    },
  });

  app.get<{ Params: NameParams; Querystring: { key: string; limit?: number } }>(
    '/consumers/:name/parked-keys/events',
    {
      schema: {
        params: nameParams,
        querystring: parkedEventsQuery,
        response: { 200: { type: 'array', items: parkedEvent }, ...errorResponses },
      },
      handler: async (request) => {
        const { key, limit } = request.query;
        const events = await admin.listParkedEvents(request.params.name, {
          key,
          ...(limit === undefined ? {} : { limit }),
        });
        return toJson(events.map((event) => redacted(ops, event)));
      },
    },
  );

  app.post<{ Params: NameParams; Body: KeyBody }>('/consumers/:name/parked-keys/replay', {
    config: { write: true },
    schema: {
      params: nameParams,
      body: parkedKeyBody,
      response: { 200: parkedKeyResult, ...errorResponses },
    },
    handler: async (request) =>
      toJson(
        await admin.replayParkedKey(request.params.name, {
          key: request.body.key,
          actor: request.sluiceActor,
          ...reasonOf(request.body),
        }),
      ),
  });

  app.post<{ Params: NameParams; Body: KeyBody }>('/consumers/:name/parked-keys/drop', {
    config: { write: true },
    schema: {
      params: nameParams,
      body: parkedKeyBody,
      response: { 200: parkedKeyResult, ...errorResponses },
    },
    handler: async (request) =>
      toJson(
        await admin.dropParkedKey(request.params.name, {
          key: request.body.key,
          actor: request.sluiceActor,
          ...reasonOf(request.body),
        }),
      ),
  });

  app.post<{ Params: NameParams; Body: { lanes: number; reason?: string } }>('/consumers/:name/lanes', {
    config: { write: true },
    schema: {
      params: nameParams,
      body: relaneBody,
      response: { 200: relaneResult, ...errorResponses },
    },
    handler: async (request) =>
      toJson(
        await admin.relane(request.params.name, {
          lanes: request.body.lanes,
          actor: request.sluiceActor,
          ...reasonOf(request.body),
        }),
      ),
  });
}

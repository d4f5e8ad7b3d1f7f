import { InvalidOptionError } from '@sluice/core';
import type { FastifyInstance } from 'fastify';
import { NO_PARAMETERS, toJson } from '../json.js';
import {
  actionResult,
  consumerDetail,
  consumerEvent,
  consumerSummary,
  diagnosis,
  disableBody,
  enableBody,
  errorResponses,
  eventBody,
  eventParams,
  instanceQuery,
  nameParams,
  restartBody,
} from '../schemas.js';
import { instanceOf, type OpsContext } from './context.js';
import { redacted } from './redact.js';

/**
 * The time of a date-time the schema accepted. A leap second (23:59:60), which the schema's format
 * allows and a JavaScript Date cannot hold, is refused saying so.
 */
function timeOf(text: string): Date {
  const time = new Date(text);
  if (Number.isNaN(time.getTime()) && /[T ]\d\d:59:60/i.test(text)) {
    throw new InvalidOptionError(
      'until',
      `${text} is a leap second, which Sluice cannot hold: give the second after it`,
    );
  }
  return time;
}

interface NameParams {
  name: string;
}
interface InstanceQuery {
  instance?: string;
}
interface ActionBody {
  instanceId?: string;
  reason?: string;
}

const reasonOf = (body?: ActionBody) => (body?.reason === undefined ? {} : { reason: body.reason });

/** Consumers: list, show, diagnose, one event's payload, and the write actions (docs/operating.md). */
export function consumerRoutes(app: FastifyInstance, { admin, ops }: OpsContext): void {
  app.get('/consumers', {
    schema: {
      querystring: NO_PARAMETERS,
      response: { 200: { type: 'array', items: consumerSummary }, ...errorResponses },
    },
    handler: async () => toJson(await admin.listConsumers()),
  });

  app.get<{ Params: NameParams; Querystring: InstanceQuery }>('/consumers/:name', {
    schema: {
      params: nameParams,
      querystring: instanceQuery,
      response: { 200: consumerDetail, ...errorResponses },
    },
    handler: async (request) =>
      toJson(await admin.showConsumer(request.params.name, instanceOf(request.query))),
  });

  app.get<{ Params: NameParams; Querystring: InstanceQuery }>('/consumers/:name/diagnose', {
    schema: {
      params: nameParams,
      querystring: instanceQuery,
      response: { 200: diagnosis, ...errorResponses },
    },
    handler: async (request) => toJson(await admin.diagnose(request.params.name, instanceOf(request.query))),
  });

  // One event of the log as the consumer sees it (the one it is stuck on, a gap id), its payload
  // redacted as the dead letters are. Digits only (the schema); beyond int8 the admin API says 400.
  app.get<{ Params: NameParams & { eventId: string }; Querystring: InstanceQuery }>(
    '/consumers/:name/events/:eventId',
    {
      schema: {
        params: eventParams,
        querystring: instanceQuery,
        response: { 200: consumerEvent, ...errorResponses },
      },
      handler: async (request) => {
        const event = await admin.showEvent(request.params.name, {
          eventId: BigInt(request.params.eventId),
          ...instanceOf(request.query),
        });
        return toJson(redacted(ops, event));
      },
    },
  );

  app.post<{ Params: NameParams; Querystring: InstanceQuery; Body: ActionBody & { from: string } }>(
    '/consumers/:name/restart',
    {
      config: { write: true },
      schema: {
        params: nameParams,
        querystring: instanceQuery,
        body: restartBody,
        response: { 200: actionResult, ...errorResponses },
      },
      handler: async (request) => {
        const { from } = request.body;
        return toJson(
          await admin.restart(request.params.name, {
            from: from === 'beginning' || from === 'now' ? from : BigInt(from),
            actor: request.sluiceActor,
            ...instanceOf(request.query, request.body),
            ...reasonOf(request.body),
          }),
        );
      },
    },
  );

  app.post<{
    Params: NameParams;
    Querystring: InstanceQuery;
    Body: (ActionBody & { until?: string; forMs?: number }) | undefined;
  }>('/consumers/:name/disable', {
    config: { write: true },
    schema: {
      params: nameParams,
      querystring: instanceQuery,
      body: disableBody,
      response: { 200: actionResult, ...errorResponses },
    },
    handler: async (request) => {
      const body = request.body ?? {};
      // forMs counts from the database's now, as the dispatchers that end the disable do.
      return toJson(
        await admin.disable(request.params.name, {
          actor: request.sluiceActor,
          ...(body.until === undefined ? {} : { until: timeOf(body.until) }),
          ...(body.forMs === undefined ? {} : { forMs: body.forMs }),
          ...instanceOf(request.query, body),
          ...reasonOf(body),
        }),
      );
    },
  });

  app.post<{ Params: NameParams; Querystring: InstanceQuery; Body: ActionBody | undefined }>(
    '/consumers/:name/enable',
    {
      config: { write: true },
      schema: {
        params: nameParams,
        querystring: instanceQuery,
        body: enableBody,
        response: { 200: actionResult, ...errorResponses },
      },
      handler: async (request) =>
        toJson(
          await admin.enable(request.params.name, {
            actor: request.sluiceActor,
            ...instanceOf(request.query, request.body),
            ...reasonOf(request.body),
          }),
        ),
    },
  );

  app.post<{ Params: NameParams; Querystring: InstanceQuery; Body: ActionBody & { eventId: string } }>(
    '/consumers/:name/skip',
    {
      config: { write: true },
      schema: {
        params: nameParams,
        querystring: instanceQuery,
        body: eventBody,
        response: { 200: actionResult, ...errorResponses },
      },
      handler: async (request) =>
        toJson(
          await admin.skip(request.params.name, {
            eventId: BigInt(request.body.eventId),
            actor: request.sluiceActor,
            ...instanceOf(request.query, request.body),
            ...reasonOf(request.body),
          }),
        ),
    },
  );

  app.post<{ Params: NameParams; Querystring: InstanceQuery; Body: ActionBody & { eventId: string } }>(
    '/consumers/:name/fence',
    {
      config: { write: true },
      schema: {
        params: nameParams,
        querystring: instanceQuery,
        body: eventBody,
        response: { 200: actionResult, ...errorResponses },
      },
      handler: async (request) =>
        toJson(
          await admin.fenceGap(request.params.name, {
            eventId: BigInt(request.body.eventId),
            actor: request.sluiceActor,
            ...instanceOf(request.query, request.body),
            ...reasonOf(request.body),
          }),
        ),
    },
  );
}

import type { FastifyInstance } from 'fastify';
import { NO_PARAMETERS, toJson } from '../json.js';
import {
  approveBody,
  droppedVersion,
  dropVersionBody,
  errorResponses,
  nameParams,
  rebuildBody,
  rebuildStatusSchema,
  versionChange,
  versionParams,
} from '../schemas.js';
import type { OpsContext } from './context.js';

interface NameParams {
  name: string;
}
interface RebuildBody {
  version?: number;
  reason?: string;
  force?: boolean;
}

const optionsOf = (body: RebuildBody | undefined) => ({
  ...(body?.version === undefined ? {} : { version: body.version }),
  ...(body?.reason === undefined ? {} : { reason: body.reason }),
});

/**
 * Rebuilds of versioned consumers (docs/design.md §12): their status and progress, the approval of
 * a takeover, pause, resume and abandon, and dropping a retired version's data.
 */
export function rebuildRoutes(app: FastifyInstance, { admin }: OpsContext): void {
  app.get('/rebuilds', {
    schema: {
      querystring: NO_PARAMETERS,
      response: { 200: { type: 'array', items: rebuildStatusSchema }, ...errorResponses },
    },
    handler: async () => toJson(await admin.rebuildStatus()),
  });

  app.get<{ Params: NameParams }>('/consumers/:name/rebuild', {
    schema: {
      params: nameParams,
      querystring: NO_PARAMETERS,
      response: { 200: { type: 'array', items: rebuildStatusSchema }, ...errorResponses },
    },
    handler: async (request) => toJson(await admin.rebuildStatus(request.params.name)),
  });

  app.post<{ Params: NameParams; Body: RebuildBody | undefined }>('/consumers/:name/rebuild/approve', {
    config: { write: true },
    schema: { params: nameParams, body: approveBody, response: { 200: versionChange, ...errorResponses } },
    handler: async (request) =>
      toJson(
        await admin.approveRebuild(request.params.name, {
          ...optionsOf(request.body),
          ...(request.body?.force === undefined ? {} : { force: request.body.force }),
          actor: request.sluiceActor,
        }),
      ),
  });

  for (const action of ['pause', 'resume', 'abandon'] as const) {
    app.post<{ Params: NameParams; Body: RebuildBody | undefined }>(`/consumers/:name/rebuild/${action}`, {
      config: { write: true },
      schema: { params: nameParams, body: rebuildBody, response: { 200: versionChange, ...errorResponses } },
      handler: async (request) => {
        const options = { ...optionsOf(request.body), actor: request.sluiceActor };
        const change =
          action === 'pause'
            ? await admin.pauseRebuild(request.params.name, options)
            : action === 'resume'
              ? await admin.resumeRebuild(request.params.name, options)
              : await admin.abandonRebuild(request.params.name, options);
        return toJson(change);
      },
    });
  }

  app.post<{
    Params: { name: string; version: string };
    Body: { dropSource?: boolean; reason?: string } | undefined;
  }>('/consumers/:name/versions/:version/drop', {
    config: { write: true },
    schema: {
      params: versionParams,
      body: dropVersionBody,
      response: { 200: droppedVersion, ...errorResponses },
    },
    handler: async (request) =>
      toJson(
        await admin.dropVersion(request.params.name, Number(request.params.version), {
          actor: request.sluiceActor,
          ...(request.body?.reason === undefined ? {} : { reason: request.body.reason }),
          ...(request.body?.dropSource === undefined ? {} : { dropSource: request.body.dropSource }),
        }),
      ),
  });
}

import { getPostgreSQLEventStore } from '@event-driven-io/emmett-postgresql';
import { graphileUtils } from '../systems/peers.js';
import { drawnStreamOf, EVENT_TYPE, payload, streamOf } from './payload.js';
import { progress } from './progress.js';
import { createDatabase, databaseExists, databaseUrl } from './server.js';
import { vacuumAll, type TemplateContext } from './templates.js';

// The peers' templates (separate from templates.ts so that Sluice-only scenarios never load the peers).

/** Emmett's schema with `events` events appended through its own API (500 per stream). */
export async function emmettTemplate(ctx: TemplateContext, events: number): Promise<string> {
  const name = `tpl_emmett_${events}`;
  if (await databaseExists(ctx.admin, name)) return name;
  const building = `${name}_building`;
  progress(
    `building template ${name} (${events.toLocaleString('en')} events through Emmett's appendToStream)`,
  );
  await createDatabase(ctx.admin, building);
  const url = databaseUrl(ctx.serverUrl, building);
  const store = getPostgreSQLEventStore(url);
  try {
    await store.schema.migrate();
    const perStream = 500;
    for (let from = 0; from < events; from += perStream) {
      const batch = [];
      for (let seq = from; seq < Math.min(events, from + perStream); seq++) {
        batch.push({ type: EVENT_TYPE, data: payload(seq) });
      }
      await store.appendToStream(`${streamOf(from)}-${from}`, batch);
    }
  } finally {
    await store.close();
  }
  await vacuumAll(ctx.serverUrl, building);
  await ctx.admin`alter database ${ctx.admin(building)} rename to ${ctx.admin(name)}`;
  return name;
}

/**
 * graphile-worker's schema with `jobs` jobs queued through addJobs (1,000 per call). With
 * `streams`, each job's payload also names the stream its event has in the slow-handler log
 * (`streamId`, drawnStreamOf), so that per-stream order can be checked as it is for Sluice.
 */
export async function graphileTemplate(
  ctx: TemplateContext,
  jobs: number,
  options: { streams?: number } = {},
): Promise<string> {
  const { streams } = options;
  const name = streams === undefined ? `tpl_graphile_${jobs}` : `tpl_graphile_drawn_${streams}_${jobs}`;
  if (await databaseExists(ctx.admin, name)) return name;
  const building = `${name}_building`;
  progress(`building template ${name} (${jobs.toLocaleString('en')} jobs through addJobs)`);
  await createDatabase(ctx.admin, building);
  const { utils, close } = await graphileUtils(databaseUrl(ctx.serverUrl, building));
  try {
    await utils.migrate();
    const perCall = 1000;
    for (let from = 0; from < jobs; from += perCall) {
      const specs = [];
      for (let seq = from; seq < Math.min(jobs, from + perCall); seq++) {
        specs.push({
          identifier: 'bench',
          payload:
            streams === undefined ? payload(seq) : { ...payload(seq), streamId: drawnStreamOf(seq, streams) },
        });
      }
      await utils.addJobs(specs);
    }
  } finally {
    await close();
  }
  await vacuumAll(ctx.serverUrl, building);
  await ctx.admin`alter database ${ctx.admin(building)} rename to ${ctx.admin(name)}`;
  return name;
}

/** An empty graphile-worker schema (latency runs). */
export function emptyGraphileTemplate(ctx: TemplateContext): Promise<string> {
  return graphileTemplate(ctx, 0);
}

/** An empty Emmett schema (latency runs). */
export function emptyEmmettTemplate(ctx: TemplateContext): Promise<string> {
  return emmettTemplate(ctx, 0);
}

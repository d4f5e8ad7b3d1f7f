import { migrate, silentLogger } from '@sluice/core';
import { pgArray } from '@sluice/core/internal';
import postgres from 'postgres';
import { benchDispatcher, statsProjection, statsTable } from '../systems/sluice.js';
import { drawnStreamOf, EVENT_TYPE, PAYLOAD_SQL } from './payload.js';
import { progress } from './progress.js';
import { createDatabase, databaseExists, databaseUrl } from './server.js';

/**
 * Template databases, built once per server and cloned for every run (a fresh database per run
 * without reloading the backlog each time). Each load ends with VACUUM ANALYZE, so no run pays
 * for hint bits or the visibility map, and the planner has statistics.
 */
export interface TemplateContext {
  readonly admin: postgres.Sql;
  readonly serverUrl: string;
  readonly versionNum: number;
}

const NOTE_REPEAT = 27; // as payload(): ~1 KB per event
const LOAD_CHUNK = 100_000;

/** The Sluice schema (migrated) with `events` events already committed, plus the baselines' cursor table. */
export async function sluiceTemplate(ctx: TemplateContext, events: number): Promise<string> {
  const name = `tpl_sluice_${events}`;
  if (await databaseExists(ctx.admin, name)) return name;
  const building = `${name}_building`;
  progress(`building template ${name} (${events.toLocaleString('en')} events of ~1 KB)`);
  await createDatabase(ctx.admin, building);
  const sql = postgres(databaseUrl(ctx.serverUrl, building), { max: 1, onnotice: () => undefined });
  try {
    await migrate(sql, { logger: silentLogger });
    await sql`create schema bench`;
    // The minimal loop's cursor rows (no gaps, no crash accounting: one row per consumer, nothing else).
    await sql`create table bench.cursors (name text primary key, cursor bigint not null default 0)`;
    for (let from = 0; from < events; from += LOAD_CHUNK) {
      const to = Math.min(events, from + LOAD_CHUNK) - 1;
      // Ids are 1..events in a fresh table, seq = id - 1: every system's tracker counts by seq.
      await sql`
        insert into sluice.events (stream_id, type, data)
        select 'order-' || (g % 1000), ${EVENT_TYPE},
               jsonb_build_object('seq', g, 'orderId', md5(g::text), 'customerId', g % 997, 'currency', 'EUR',
                 'totalCents', (g::bigint * 7919) % 100000, 'lines', g % 5 + 1,
                 'note', repeat(md5(g::text), ${NOTE_REPEAT}::int))
        from generate_series(${from}::int, ${to}::int) g
        order by g`;
    }
    await sql`vacuum (analyze) sluice.events`;
  } finally {
    await sql.end();
  }
  await ctx.admin`alter database ${ctx.admin(building)} rename to ${ctx.admin(name)}`;
  return name;
}

/**
 * The slow-handler scenario's log: `events` events of ~1 KB, each in one of `streams` streams drawn
 * at random (drawnStreamOf; the graphile-worker template puts the same stream in each job).
 */
export async function slowHandlerTemplate(
  ctx: TemplateContext,
  events: number,
  streams: number,
): Promise<string> {
  const name = `tpl_sluice_drawn_${streams}_${events}`;
  if (await databaseExists(ctx.admin, name)) return name;
  const building = `${name}_building`;
  progress(
    `building template ${name} (${events.toLocaleString('en')} events of ~1 KB over ${streams.toLocaleString('en')} streams drawn at random)`,
  );
  await createDatabase(ctx.admin, building);
  const sql = postgres(databaseUrl(ctx.serverUrl, building), { max: 1, onnotice: () => undefined });
  try {
    await migrate(sql, { logger: silentLogger });
    for (let from = 0; from < events; from += LOAD_CHUNK) {
      const to = Math.min(events, from + LOAD_CHUNK);
      const ids = Array.from({ length: to - from }, (_, i) => drawnStreamOf(from + i, streams));
      // Ids are 1..events in a fresh table, seq = id - 1, as in sluiceTemplate.
      await sql.unsafe(
        `insert into sluice.events (stream_id, type, data)
         select s.stream, $1, ${PAYLOAD_SQL}
         from unnest($2::text[]) with ordinality as s(stream, n)
         cross join lateral (select ($3::int + s.n - 1)::int as g) x
         order by s.n`,
        [EVENT_TYPE, pgArray(ids), from],
      );
    }
    await sql`vacuum (analyze) sluice.events`;
  } finally {
    await sql.end();
  }
  await ctx.admin`alter database ${ctx.admin(building)} rename to ${ctx.admin(name)}`;
  return name;
}

/**
 * The rebuild scenario's log: sluiceTemplate's `events` events, and version 1 of the stats
 * projection live and caught up on them: its row registered at the head (startFrom 'now', by a
 * dispatcher that declares it), its table bench.proj_v1 holding the row its handler writes for
 * every event (filled in SQL, the same columns), and version 2's table bench.proj_v2, empty.
 */
export async function rebuildTemplate(ctx: TemplateContext, events: number): Promise<string> {
  const name = `tpl_rebuild_${events}`;
  if (await databaseExists(ctx.admin, name)) return name;
  const log = await sluiceTemplate(ctx, events);
  const building = `${name}_building`;
  progress(`building template ${name} (${log} with version 1 of a projection live at its head)`);
  await createDatabase(ctx.admin, building, { template: log, versionNum: ctx.versionNum });
  const sql = postgres(databaseUrl(ctx.serverUrl, building), { max: 2, onnotice: () => undefined });
  try {
    for (const version of [1, 2]) {
      await sql`
        create table ${sql(statsTable(version))} (
          event_id bigint primary key, order_id text not null, total_cents bigint not null)`;
    }
    await sql`
      insert into ${sql(statsTable(1))} (event_id, order_id, total_cents)
      select id, data->>'orderId', (data->>'totalCents')::bigint from sluice.events order by id`;
    const dispatcher = benchDispatcher(sql, [
      statsProjection(
        1,
        () => {
          throw new Error('the template registers version 1, it runs nothing');
        },
        { startFrom: 'now' },
      ),
    ]);
    await dispatcher.ensureRegistered();
    await dispatcher.stop();
    await sql`vacuum (analyze)`;
  } finally {
    await sql.end();
  }
  await ctx.admin`alter database ${ctx.admin(building)} rename to ${ctx.admin(name)}`;
  return name;
}

/** An empty migrated Sluice schema (append, latency and idle runs start from it). */
export function emptySluiceTemplate(ctx: TemplateContext): Promise<string> {
  return sluiceTemplate(ctx, 0);
}

export async function vacuumAll(serverUrl: string, database: string): Promise<void> {
  const sql = postgres(databaseUrl(serverUrl, database), { max: 1, onnotice: () => undefined });
  try {
    await sql`vacuum (analyze)`;
  } finally {
    await sql.end();
  }
}

/** Clones `template` into a fresh database for one run; the caller drops it. */
export async function freshDatabase(ctx: TemplateContext, template: string, label: string): Promise<string> {
  const name = `run_${label.replace(/[^a-z0-9]+/gi, '_').toLowerCase()}_${process.pid}_${nextRun++}`;
  await createDatabase(ctx.admin, name, { template, versionNum: ctx.versionNum });
  return name;
}

let nextRun = 0;

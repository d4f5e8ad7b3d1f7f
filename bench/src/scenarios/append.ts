import { append, transaction, type NewEvent } from '@sluice/core';
import { pgArray, wakeUpChannel, wakeUpNotifierFor } from '@sluice/core/internal';
import type postgres from 'postgres';
import { YoungGeneration } from '../harness/gc.js';
import { EVENT_TYPE, payload, streamOf } from '../harness/payload.js';
import { progress } from '../harness/progress.js';
import { percentile } from '../harness/stats.js';
import { emptySluiceTemplate } from '../harness/templates.js';
import { APPEND_SYSTEMS } from '../names.js';
import { RowCollector, type ScenarioResult } from '../report/types.js';
import { pool } from '../systems/sluice.js';
import { rotate, runDatabase, type ScenarioContext } from './context.js';

type AppendSystem = (typeof APPEND_SYSTEMS)[keyof typeof APPEND_SYSTEMS];

/**
 * Scenario 3: 8 concurrent writers appending 1 or 10 events per transaction for a fixed time, with
 * each wake-up mechanism, against a bare INSERT of the same rows.
 */
export async function appendOverhead(ctx: ScenarioContext): Promise<ScenarioResult> {
  const { config } = ctx;
  const { writers, seconds, warmupSeconds, eventsPerTx } = config.append;
  const runs = config.append.runs ?? config.runs;
  const rounds = config.append.rounds;
  const rows = new RowCollector('append');
  const template = await emptySluiceTemplate(ctx);
  const systems = Object.values(APPEND_SYSTEMS);
  // Payload objects made up front: building them is not what is measured (serialising them is).
  const payloads = Array.from({ length: 1024 }, (_, seq) => payload(seq));

  for (const perTx of eventsPerTx) {
    for (let run = 0; run < runs; run++) {
      progress(
        `append: ${writers} writers × ${perTx} event(s)/tx, ${systems.length} systems in ${rounds} interleaved rounds, run ${run + 1}/${runs}`,
      );
      const db = await runDatabase(ctx, template, 'append');
      // One connection per writer plus one for the after-commit NOTIFY; a LISTEN session as a
      // dispatcher would hold (NOTIFY's queue work depends on listeners).
      const sql = pool(db.url, writers + 1);
      const listener = pool(db.url, 1);
      try {
        let heard = 0;
        await listener.listen(wakeUpChannel('sluice'), () => {
          heard++;
        });
        await Promise.all(Array.from({ length: writers + 1 }, () => sql`select 1`));
        const totals = new Map(systems.map((system) => [system, emptyTotals()]));
        let nextSeq = 0;
        /** Writes with `system` for `ms`; returns each commit's latency. */
        const writeFor = async (system: AppendSystem, ms: number) => {
          const write = writerFor(system, sql);
          const type = typeOf(system);
          const latencies: number[] = [];
          const endAt = performance.now() + ms;
          await Promise.all(
            Array.from({ length: writers }, async () => {
              while (performance.now() < endAt) {
                const events: NewEvent[] = [];
                for (let i = 0; i < perTx; i++) {
                  const seq = nextSeq++;
                  events.push({ streamId: streamOf(seq), type, data: payloads[seq % payloads.length] ?? {} });
                }
                const started = performance.now();
                await write(events);
                latencies.push(performance.now() - started);
              }
            }),
          );
          return latencies;
        };
        // A fresh database starts slow (its table and indexes grow, its pages are first read): the
        // first commits, by every system in turn, are not measured.
        for (const system of systems) {
          const written = await writeFor(system, (warmupSeconds * 1000) / systems.length);
          (totals.get(system) as Totals).unmeasured += written.length;
        }
        // The systems take turns in short slices on the same database and pool, in a different order
        // each round: drift over the run (the disk's flush time, the table's growth, background
        // work) falls on all of them alike instead of on whichever ran last.
        for (let round = 0; round < rounds; round++) {
          for (const system of rotate(systems, run + round)) {
            const sum = totals.get(system) as Totals;
            const meter = db.meter();
            await meter.start();
            const heardBefore = heard;
            const young = new YoungGeneration();
            young.start();
            const latencies = await writeFor(system, (seconds * 1000) / rounds);
            // A NOTIFY still waiting for its coalescing window is this slice's cost, not the next's.
            await wakeUpNotifierFor(sql, 'sluice').flush();
            const heap = young.stop();
            sum.allocatedBytes += heap.allocatedBytes;
            sum.scavengedBytes += heap.scavengedBytes;
            sum.survivedBytes += heap.survivedBytes;
            const m = await meter.stop();
            sum.heard += heard - heardBefore;
            sum.latencies.push(...latencies);
            sum.wallMs += m.wallMs;
            sum.nodeCpuMs += (m.nodeCpuPercent * m.wallMs) / 100;
            if (m.pgCpuPercent === undefined) sum.pgCpuMs = undefined;
            else if (sum.pgCpuMs !== undefined) sum.pgCpuMs += (m.pgCpuPercent * m.wallMs) / 100;
          }
        }
        const stored = new Map(
          (
            await sql<{ type: string; n: string }[]>`
              select type, count(*)::text as n from sluice.events group by type`
          ).map((r) => [r.type, Number(r.n)]),
        );
        for (const system of systems) {
          const sum = totals.get(system) as Totals;
          const committed = sum.latencies.length;
          const txPerSecond = (committed * 1000) / sum.wallMs;
          const perTxUs = (cpuMs: number | undefined) =>
            cpuMs === undefined ? undefined : (cpuMs * 1000) / committed;
          const expected = (sum.unmeasured + committed) * perTx;
          const found = stored.get(typeOf(system)) ?? 0;
          rows.add(
            `${writers} writers, ${perTx} event${perTx > 1 ? 's' : ''}/tx`,
            system,
            [
              { name: 'events/s', unit: '', value: txPerSecond * perTx },
              { name: 'transactions/s', unit: '', value: txPerSecond },
              { name: 'NOTIFYs heard/s', unit: '', value: (sum.heard * 1000) / sum.wallMs },
              { name: 'commit p50', unit: 'ms', value: percentile(sum.latencies, 50) },
              { name: 'commit p99', unit: 'ms', value: percentile(sum.latencies, 99) },
              {
                name: 'PostgreSQL CPU',
                unit: '% of a core',
                value: sum.pgCpuMs === undefined ? undefined : (100 * sum.pgCpuMs) / sum.wallMs,
              },
              { name: 'Node CPU', unit: '% of a core', value: (100 * sum.nodeCpuMs) / sum.wallMs },
              { name: 'PostgreSQL CPU per transaction', unit: 'µs', value: perTxUs(sum.pgCpuMs) },
              { name: 'Node CPU per transaction', unit: 'µs', value: perTxUs(sum.nodeCpuMs) },
              {
                name: 'allocated per transaction',
                unit: 'KiB',
                value: sum.allocatedBytes / 1024 / committed,
              },
              {
                name: 'found alive by scavenges',
                unit: '%',
                value: sum.scavengedBytes > 0 ? (100 * sum.survivedBytes) / sum.scavengedBytes : undefined,
              },
            ],
            { lost: Math.max(0, expected - found), duplicated: Math.max(0, found - expected) },
          );
          progress(
            `  ${system}: ${Math.round(txPerSecond).toLocaleString('en')} tx/s, p99 ${percentile(sum.latencies, 99).toFixed(2)} ms`,
          );
        }
      } finally {
        await listener.end();
        await sql.end();
        await db.drop();
      }
    }
  }

  return {
    scenario: 'append',
    title: `Append overhead: ${writers} concurrent writers, ${eventsPerTx.join(' or ')} events per transaction`,
    rows: rows.rows(),
    profiles: [],
    notes: [
      `${writers} writers on a pool of ${writers + 1} connections, each committing transactions back to back; a LISTEN session on Sluice's channel is open throughout, as a running dispatcher would hold. ` +
        `Each run is one fresh database on which every system writes for ${warmupSeconds / systems.length} s unmeasured, then the systems take turns in ${rounds} rounds of ${seconds / rounds} s each (${seconds} s per system), in a different order each round; ` +
        "a system's figures sum its slices, and each system writes its own event type, so the rows it stored are counted separately. Taking turns puts the drift of a run (the disk's flush time, the table's growth) on all systems alike.",
      'bare insert: the same INSERT … SELECT FROM unnest() into the same events table (its xid-before-id trigger included, docs/design.md §3.2), without RETURNING, validation, metadata or wake-up.',
      "Sluice append() runs inside sql.begin(): wakeUp 'none' is the append alone; transaction() adds the after-commit wake-up (a NOTIFY from the pool: at once unless 3 commits came in the 10 ms before, else ≤ 1 per 10 ms); " +
        "'in-transaction' NOTIFYs inside the writer's transaction, which serialises the commits of all notifying transactions.",
      "allocated per transaction: what the whole process (writers, pool, LISTEN session) allocated in V8's young generation during the system's slices, from V8's heap statistics before and after each GC, divided by its measured commits; found alive by scavenges: the share of the young generation that the scavenges during its slices found still reachable.",
      'Lost / duplicated here compare the rows stored with the events the writers saw committed.',
    ],
  };
}

interface Totals {
  /** Commits of the warm-up. */
  unmeasured: number;
  heard: number;
  wallMs: number;
  nodeCpuMs: number;
  pgCpuMs: number | undefined;
  /** Allocated in V8's young generation by the whole process while this system wrote. */
  allocatedBytes: number;
  /** The young generation that scavenges went through during its slices, and what they found alive. */
  scavengedBytes: number;
  survivedBytes: number;
  /** Each measured commit's latency: one per commit. */
  latencies: number[];
}

function emptyTotals(): Totals {
  return {
    unmeasured: 0,
    heard: 0,
    wallMs: 0,
    nodeCpuMs: 0,
    pgCpuMs: 0,
    allocatedBytes: 0,
    scavengedBytes: 0,
    survivedBytes: 0,
    latencies: [],
  };
}

/** Each system writes its own event type (all of one length), so the rows it stored can be counted. */
function typeOf(system: AppendSystem): string {
  return `${EVENT_TYPE}.${Object.values(APPEND_SYSTEMS).indexOf(system)}`;
}

function writerFor(system: AppendSystem, sql: postgres.Sql): (events: NewEvent[]) => Promise<unknown> {
  switch (system) {
    case APPEND_SYSTEMS.bare:
      return (events) => {
        const streams = pgArray(events.map((e) => e.streamId));
        const types = pgArray(events.map((e) => e.type));
        const data = pgArray(events.map((e) => JSON.stringify(e.data)));
        return sql.begin(
          (tx) => tx`
            insert into sluice.events (stream_id, type, data)
            select u.s, u.t, u.d::jsonb from unnest(${streams}::text[], ${types}::text[], ${data}::text[]) as u(s, t, d)`,
        );
      };
    case APPEND_SYSTEMS.none:
      return (events) => sql.begin((tx) => append(tx, events, { wakeUp: 'none' }));
    case APPEND_SYSTEMS.auto:
      return (events) => transaction(sql, (tx) => append(tx, events));
    case APPEND_SYSTEMS.inTx:
      return (events) => sql.begin((tx) => append(tx, events, { wakeUp: 'in-transaction' }));
  }
}

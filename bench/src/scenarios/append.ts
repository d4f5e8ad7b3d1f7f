import { append, pgArray, transaction, wakeUpChannel, type NewEvent } from '@sluice/core';
import type postgres from 'postgres';
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
  const rows = new RowCollector('append');
  const template = await emptySluiceTemplate(ctx);
  const systems = Object.values(APPEND_SYSTEMS);
  // Payload objects made up front: building them is not what is measured (serialising them is).
  const payloads = Array.from({ length: 1024 }, (_, seq) => payload(seq));

  for (const perTx of eventsPerTx) {
    for (let run = 0; run < runs; run++) {
      for (const system of rotate(systems, run)) {
        progress(`append: ${writers} writers × ${perTx} event(s)/tx, ${system}, run ${run + 1}/${runs}`);
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
          const write = writerFor(system, sql);
          const meter = db.meter();
          const latencies: number[] = [];
          let committed = 0;
          let warmupCommitted = 0;
          let nextSeq = 0;
          const writeFor = (ms: number, measured: boolean) => {
            const endAt = performance.now() + ms;
            return Promise.all(
              Array.from({ length: writers }, async () => {
                while (performance.now() < endAt) {
                  const events: NewEvent[] = [];
                  for (let i = 0; i < perTx; i++) {
                    const seq = nextSeq++;
                    events.push({
                      streamId: streamOf(seq),
                      type: EVENT_TYPE,
                      data: payloads[seq % payloads.length] ?? {},
                    });
                  }
                  const started = performance.now();
                  await write(events);
                  if (!measured) {
                    warmupCommitted++;
                    continue;
                  }
                  latencies.push(performance.now() - started);
                  committed++;
                }
              }),
            );
          };
          // A fresh database starts slow (its table and indexes grow, its pages are first read):
          // the first commits are not measured.
          await writeFor(warmupSeconds * 1000, false);
          await meter.start();
          const heardBefore = heard;
          await writeFor(seconds * 1000, true);
          const heardDuring = heard - heardBefore;
          const m = await meter.stop();
          const txPerSecond = (committed * 1000) / m.wallMs;
          const [count] = await sql<{ n: string }[]>`select count(*)::text as n from sluice.events`;
          const stored = Number(count?.n ?? 0);
          const expected = (warmupCommitted + committed) * perTx;
          rows.add(
            `${writers} writers, ${perTx} event${perTx > 1 ? 's' : ''}/tx`,
            system,
            [
              { name: 'events/s', unit: '', value: txPerSecond * perTx },
              { name: 'transactions/s', unit: '', value: txPerSecond },
              { name: 'NOTIFYs heard/s', unit: '', value: (heardDuring * 1000) / m.wallMs },
              { name: 'commit p50', unit: 'ms', value: percentile(latencies, 50) },
              { name: 'commit p99', unit: 'ms', value: percentile(latencies, 99) },
              { name: 'PostgreSQL CPU', unit: '% of a core', value: m.pgCpuPercent },
              { name: 'Node CPU', unit: '% of a core', value: m.nodeCpuPercent },
              {
                name: 'PostgreSQL CPU per transaction',
                unit: 'µs',
                value:
                  m.pgCpuPercent === undefined ? undefined : (m.pgCpuPercent * m.wallMs * 10) / committed,
              },
              {
                name: 'Node CPU per transaction',
                unit: 'µs',
                value: (m.nodeCpuPercent * m.wallMs * 10) / committed,
              },
            ],
            { lost: Math.max(0, expected - stored), duplicated: Math.max(0, stored - expected) },
          );
          progress(
            `  ${Math.round(txPerSecond).toLocaleString('en')} tx/s, p99 ${percentile(latencies, 99).toFixed(2)} ms`,
          );
        } finally {
          await listener.end();
          await sql.end();
          await db.drop();
        }
      }
    }
  }

  return {
    scenario: 'append',
    title: `Append overhead: ${writers} concurrent writers, ${eventsPerTx.join(' or ')} events per transaction`,
    rows: rows.rows(),
    profiles: [],
    notes: [
      `${writers} writers on a pool of ${writers + 1} connections, each committing transactions back to back for ${seconds} s after a ${warmupSeconds} s warm-up that is not measured; a LISTEN session on Sluice's channel is open throughout, as a running dispatcher would hold.`,
      'bare insert: the same INSERT … SELECT FROM unnest() into the same events table (its xid-before-id trigger included, DESIGN §3), without RETURNING, validation, metadata or wake-up.',
      "Sluice append() runs inside sql.begin(): wakeUp 'none' is the append alone; transaction() adds the after-commit wake-up (a NOTIFY from the pool: at once after 2 ms without a commit, else ≤ 1 per 10 ms); " +
        "'in-transaction' NOTIFYs inside the writer's transaction, which serialises the commits of all notifying transactions.",
      'Lost / duplicated here compare the rows stored with the events the writers saw committed.',
    ],
  };
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

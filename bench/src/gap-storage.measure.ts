// The measurement behind the gaps table (docs/design.md §2.1, §5.5): how much a turn costs with
// 100k pending ranges, stored as rows of a table of their own or as a jsonb list on the state row.
//
// The state: a consumer whose horizon is held (a long transaction), with 100,000 single-id ranges
// pending — what a rollback-heavy load leaves behind while the horizon cannot move.
//  * table, steady: Sluice's turn when nothing changed for the ranges (the watched transactions
//    still run), i.e. the cost every turn pays while the ranges pile up.
//  * table, full recheck: the same turn forced to re-fetch every range (gaps_recheck), the worst case.
//  * jsonb list: the least a jsonb design pays on every turn that changes anything: read the list,
//    parse it, serialise it, write the row back (no re-fetch counted at all).
import { writeFile } from 'node:fs/promises';
import { append, createDispatcher, silentLogger } from '@sluice/core';
import { openTransaction } from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import { test } from 'vitest';

const db = await useTestDatabase();
const RANGES = 100_000;
const RUNS = 5;

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
}

async function time(run: () => Promise<unknown>): Promise<number[]> {
  const samples: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const started = performance.now();
    await run();
    samples.push(performance.now() - started);
  }
  return samples;
}

test('a turn with 100,000 pending ranges', async () => {
  const sql = db.sql;
  // 200,001 events; the even ids stay pending as 100,000 one-id ranges fenced above the horizon.
  await sql`insert into sluice.events (stream_id, type, data) select 's', 'T', '{}'::jsonb from generate_series(1, ${2 * RANGES + 1})`;
  const holder = await openTransaction(sql);
  const fence = await holder.xid(); // held open: xmin stays at or below it, nothing can burn
  const consumer = { name: 'piled-up', handler: () => undefined };
  const dispatcher = createDispatcher({ sql, consumers: [consumer], logger: silentLogger, listen: false });
  await dispatcher.ensureRegistered();
  await sql`
    insert into sluice.gaps (consumer_name, instance_id, from_id, to_id, fence)
    select 'piled-up', '*', 2 * g, 2 * g, ${fence.toString()}::xid8 from generate_series(1, ${RANGES}) g`;
  await sql`
    update sluice.consumers set cursor = ${2 * RANGES + 1}, gap_count = ${RANGES},
      gap_min_fence = ${fence.toString()}::xid8, gap_watch = array[${fence.toString()}::xid8]
    where name = 'piled-up'`;
  await sql`analyze sluice.gaps`;
  // New events keep the consumer busy, so every measured runOnce() really takes a turn.
  const nextEvent = () => sql.begin((tx) => append(tx, [{ streamId: 's', type: 'T', data: {} }]));

  const steady = await time(async () => {
    await nextEvent();
    await dispatcher.runOnce();
  });
  const full = await time(async () => {
    await nextEvent();
    await sql`update sluice.consumers set gaps_recheck = true where name = 'piled-up'`;
    await dispatcher.runOnce();
  });

  await sql`create table jsonb_state (id int primary key, pending_gaps jsonb not null)`;
  await sql`
    insert into jsonb_state
    select 1, jsonb_agg(jsonb_build_object('from', (2 * g)::text, 'to', (2 * g)::text, 'fence', ${fence.toString()}::text))
    from generate_series(1, ${RANGES}) g`;
  const jsonb = await time(() =>
    sql.begin(async (tx) => {
      const [row] = await tx<
        { pending_gaps: string }[]
      >`select pending_gaps::text from jsonb_state where id = 1 for update`;
      const ranges = JSON.parse(row?.pending_gaps ?? '[]') as { from: string; to: string; fence: string }[];
      ranges.pop(); // one range resolved
      await tx`update jsonb_state set pending_gaps = ${JSON.stringify(ranges)}::text::jsonb where id = 1`;
    }),
  );
  const [size] = await sql<
    { bytes: number }[]
  >`select pg_column_size(pending_gaps) as bytes from jsonb_state`;
  await holder.rollback();

  const fmt = (samples: number[]) =>
    `${median(samples).toFixed(1)} ms (min ${Math.min(...samples).toFixed(1)}, max ${Math.max(...samples).toFixed(1)})`;
  const report = [
    '# A turn with 100,000 pending gap ranges',
    '',
    `Measured ${new Date().toISOString()} on ${process.platform}/${process.arch}, Node ${process.version}, ${RUNS} runs each (median, min, max).`,
    '',
    '| storage | turn |',
    '| --- | --- |',
    `| table rows, nothing changed (steady state) | ${fmt(steady)} |`,
    `| table rows, every range re-fetched (worst case) | ${fmt(full)} |`,
    `| jsonb list on the consumer row: read + parse + write back only | ${fmt(jsonb)} |`,
    '',
    `The jsonb list is ${((size?.bytes ?? 0) / 1024 / 1024).toFixed(1)} MiB on the row (TOASTed): every turn that changes one range rewrites it.`,
    '',
  ].join('\n');
  console.log(report);
  await writeFile(new URL('../results/gap-storage.md', import.meta.url), report);
});

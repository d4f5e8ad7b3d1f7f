// The rebuild suite (docs/design.md §12, docs/reliability.md §5): version 2 of a transactional
// projection rebuilt beside version 1 in dispatcher processes of their own, against real PostgreSQL.
//   V1: writers with rollbacks and a long-held gap append throughout; the process running the
//       rebuild is killed with SIGKILL mid-rebuild and started again; once approved, version 2
//       takes over, and its rows are exactly the committed log: nothing lost, nothing doubled
//       (a row per event, written in the turn's transaction).
import { setTimeout as sleep } from 'node:timers/promises';
import { beginTakeover, rebuildProgress, selectVersions, tables } from '@sluice/core/internal';
import { appendEvents, freshSchema, holdGap, until } from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import { afterAll, test } from 'vitest';
import type { RebuildChildConfig } from './rebuild-child.js';
import { check, killChildren, ScenarioRecorder, startChild, writers, type Child } from './support.js';

const db = await useTestDatabase();
const recorder = new ScenarioRecorder('scenarios-rebuild');
const CHILD = new URL('./rebuild-child.ts', import.meta.url);

afterAll(async () => {
  await killChildren();
  await recorder.write(db.sql);
});

function start(config: Omit<RebuildChildConfig, 'parentPid' | 'url'>): Child {
  return startChild(CHILD, { ...config, url: db.url });
}

async function stopCleanly(child: Child): Promise<void> {
  child.kill('SIGTERM');
  const exit = await Promise.race([child.exited, sleep(20_000).then(() => undefined)]);
  check(
    exit?.code === 0,
    `a dispatcher did not stop cleanly: ${JSON.stringify(exit)}\n${child.output().slice(-1500)}`,
  );
}

const ids = async (schema: string, relation: string): Promise<bigint[]> =>
  (
    await db.sql<
      { id: string }[]
    >`select r.id::text as id from ${db.sql(`${schema}.${relation}`)} r order by r.id`
  ).map((r) => BigInt(r.id));

test('V1: a rebuild under writers with rollbacks and a held gap, its process killed -9: version 2 equals the committed log', async () => {
  await recorder.run('V1', 'Rebuild under kill -9', ['I1', 'I3', 'I7'], async (figures) => {
    const schema = await freshSchema(db.sql, 'v1');
    const t = tables(db.sql, schema);
    for (const v of [1, 2])
      await db.sql`create table ${db.sql(`${schema}.proj_v${v}`)} (id bigint primary key)`;
    await appendEvents(
      db.sql,
      1_500,
      (n) => ({ streamId: `seed-${n % 20}`, type: 'Counted', data: {} }),
      schema,
    );
    const base = { schema, batchSize: 25, rebuildHandlerMs: 1 };
    const a = start({ ...base, instanceId: 'v1-a' });
    await a.announced('REBUILD READY');
    const load = writers(db.sql, schema, {
      count: 3,
      seed: 303,
      pauseMs: 5,
      event: (w, i) => ({ streamId: `w${w}-${i}`, type: 'Counted', data: {} }),
    });
    const held = await holdGap(db.sql, { streamId: 'held', type: 'Counted', data: {} }, { schema });

    // Killed mid-rebuild, with version 2's turns in flight.
    await until(
      async () => (await ids(schema, 'proj_v2')).length > 400,
      60_000,
      'version 2 to have rebuilt 400 events',
    );
    const before = (await ids(schema, 'proj_v2')).length;
    a.kill('SIGKILL');
    await a.exited;
    const b = start({ ...base, instanceId: 'v1-b' });
    await b.announced('REBUILD READY');
    await until(() => load.state.committed > 1_500, 60_000, 'the writers to commit 1,500 more events');
    await load.stop();
    await held.release({ commit: true });
    await until(
      async () => (await rebuildProgress(db.sql, t, 'stats'))[0]?.lagEvents === 0n,
      120_000,
      'version 2 to catch up',
    );
    const change = await beginTakeover(db.sql, t, schema, 'stats', {
      actor: 'v1',
      within: 1_000n,
      lockTimeoutMs: 5_000,
    });
    await until(
      async () => (await selectVersions(db.sql, t, ['stats'])).find((v) => v.state === 'live')?.version === 2,
      60_000,
      'version 2 to go live',
    );
    await stopCleanly(b);

    const log = await ids(schema, 'events');
    const v2 = await ids(schema, 'proj_v2');
    const v1 = await ids(schema, 'proj_v1');
    const logged = new Set(log);
    const lost = log.filter((id) => !new Set(v2).has(id)).length;
    const phantoms = v2.filter((id) => !logged.has(id)).length;
    const barrier = change.barrier ?? 0n;
    const v1Missing = log.filter((id) => id <= barrier && !new Set(v1).has(id)).length;
    Object.assign(figures, {
      'events in the log': log.length,
      'committed / rolled back by the writers': `${load.state.committed} / ${load.state.rolledBack}`,
      'version 2 rows when killed': before,
      'version 2 rows / lost / phantoms': `${v2.length} / ${lost} / ${phantoms}`,
      'takeover barrier': barrier.toString(),
      'version 1 rows missing at or below the barrier': v1Missing,
    });
    check(lost === 0, `${lost} committed events missing from version 2`);
    check(phantoms === 0, `${phantoms} version 2 rows for no committed event`);
    check(v2.length === log.length, `version 2 has ${v2.length} rows for ${log.length} events`);
    check(v1Missing === 0, `version 1 lacks ${v1Missing} events at or below the barrier it stopped at`);
  });
});

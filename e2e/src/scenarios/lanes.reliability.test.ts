// The keyed-lane suite (docs/design.md §11, docs/reliability.md §5, L1–L4): a consumer run as
// lanes, in dispatcher processes of their own, against real PostgreSQL. Writers append to their own
// streams in transactions, a fifth of them rolled back, so each stream's ids grow with its commits
// and a stream's events must reach its handler in id order (a redelivery after a crash excepted).
//   L1: 2 processes, 16 lanes, writers with rollbacks, kill -9 of one process and a restart:
//       nothing lost, no inversion within a stream, redeliveries bounded by the killed turns.
//   L2: the lane count changed 4 → 16 → 2 by an operator while writers append: nothing lost,
//       nothing reordered within a stream, redeliveries bounded by one batch per old lane.
//   L3: a key parked by a failing handler, replayed in order by an operator once fixed.
//   L4: two instances share 16 busy lanes: each holds about half.
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createAdmin } from '@sluice/admin';
import { append, type EventRecord, type Sql, type TransactionSql } from '@sluice/core';
import { tables } from '@sluice/core/internal';
import { freshSchema, until } from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import { afterAll, beforeAll, test } from 'vitest';
import type { LaneDelivery, LanesChildConfig } from './lanes-child.js';
import {
  check,
  killChildren,
  quietDispatcher,
  ScenarioRecorder,
  startChild,
  writers,
  type Child,
} from './support.js';

const db = await useTestDatabase();
const recorder = new ScenarioRecorder('scenarios-lanes');
const CHILD = new URL('./lanes-child.ts', import.meta.url);
const BATCH = 20;
let dir = '';

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sluice-lanes-'));
});

afterAll(async () => {
  await killChildren();
  await recorder.write(db.sql);
  await rm(dir, { recursive: true, force: true });
});

function start(config: Omit<LanesChildConfig, 'parentPid' | 'url'>): Child {
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

async function deliveries(file: string): Promise<LaneDelivery[]> {
  const text = await readFile(file, 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter((line) => line.endsWith('}'))
    .map((line) => JSON.parse(line) as LaneDelivery);
}

/**
 * Writers appending to streams of their own (stream `w<writer>-<n>`, 25 a writer), each event
 * numbered within its writer, a fifth of the transactions rolled back, until `stop()`.
 */
function keyedWriters(sql: Sql, schema: string, count: number, seed: number) {
  const next = new Array<number>(count).fill(0);
  return writers(sql, schema, {
    count,
    seed,
    pauseMs: 4,
    event: (w, _i, rand) => {
      const k = next[w] ?? 0;
      next[w] = k + 1;
      return { streamId: `w${w}-${Math.floor(rand() * 25)}`, type: 'Keyed', data: { k } };
    },
  });
}

/** Committed ids with their stream, in id order. */
async function committedLog(schema: string): Promise<{ id: string; stream_id: string }[]> {
  return db.sql<{ id: string; stream_id: string }[]>`
    select id::text as id, stream_id from ${tables(db.sql, schema).events} order by id`;
}

/** Lost ids, duplicates, and inversions within a stream (a first delivery below one already made). */
function judge(log: readonly { id: string; stream_id: string }[], seen: readonly LaneDelivery[]) {
  const delivered = new Map<string, number>();
  const highest = new Map<string, bigint>();
  let inversions = 0;
  const ordered = [...seen].sort((a, b) => a.t - b.t);
  for (const d of ordered) {
    const n = (delivered.get(d.id) ?? 0) + 1;
    delivered.set(d.id, n);
    if (n > 1) continue;
    const id = BigInt(d.id);
    const top = highest.get(d.s) ?? 0n;
    if (id < top) inversions += 1;
    if (id > top) highest.set(d.s, id);
  }
  const lost = log.filter((e) => !delivered.has(e.id)).length;
  const duplicates = [...delivered.values()].reduce((sum, n) => sum + n - 1, 0);
  const phantoms = [...delivered.keys()].filter((id) => !log.some((e) => e.id === id)).length;
  return { lost, duplicates, inversions, phantoms, delivered: delivered.size };
}

/** Waits until every lane row of `keyed` is at the log head with no pending gap, and no change is under way. */
async function caughtUp(schema: string, timeoutMs = 120_000): Promise<void> {
  const t = tables(db.sql, schema);
  await until(
    async () => {
      const [row] = await db.sql<{ behind: number; changes: number }[]>`
        select (select count(*)::int from ${t.consumers} c
                where c.name = 'keyed' and (c.cursor < (select coalesce(max(id), 0) from ${t.events}) or c.gap_count > 0))
               as behind,
               (select count(*)::int from ${t.laneChanges}) as changes`;
      return row?.behind === 0 && row.changes === 0;
    },
    timeoutMs,
    'every lane of keyed to catch up',
  );
}

test('L1: 2 processes, 16 lanes, writers with rollbacks, kill -9: nothing lost, order kept per stream', async () => {
  await recorder.run('L1', 'Keyed lanes under kill -9', ['I1', 'I2', 'I3', 'I7'], async (figures) => {
    const schema = await freshSchema(db.sql, 'l1');
    const files = [join(dir, 'l1-a.jsonl'), join(dir, 'l1-b.jsonl')];
    const base = { schema, lanes: 16, concurrency: 8, batchSize: BATCH, handlerMs: 0 };
    const a = start({ ...base, file: files[0] as string, instanceId: 'l1-a', generation: 1 });
    const b = start({ ...base, file: files[1] as string, instanceId: 'l1-b', generation: 1 });
    await Promise.all([a.announced('LANES READY'), b.announced('LANES READY')]);
    const load = keyedWriters(db.sql, schema, 4, 101);
    await until(() => load.state.committed > 1_500, 60_000, 'the writers to commit 1,500 events');
    a.kill('SIGKILL');
    await a.exited;
    const restarted = start({ ...base, file: files[0] as string, instanceId: 'l1-a', generation: 2 });
    await restarted.announced('LANES READY');
    await until(() => load.state.committed > 3_000, 60_000, 'the writers to commit 3,000 events');
    await load.stop();
    await caughtUp(schema);
    await Promise.all([stopCleanly(restarted), stopCleanly(b)]);

    const seen = (await Promise.all(files.map(deliveries))).flat();
    const verdict = judge(await committedLog(schema), seen);
    const lanesByProcess = new Map<string, Set<string>>();
    for (const d of seen) {
      const process = d.p.split('#')[0] as string;
      if (!lanesByProcess.has(process)) lanesByProcess.set(process, new Set());
      lanesByProcess.get(process)?.add(d.l);
    }
    Object.assign(figures, {
      'committed / rolled back': `${load.state.committed} / ${load.state.rolledBack}`,
      lost: verdict.lost,
      phantoms: verdict.phantoms,
      'inversions within a stream': verdict.inversions,
      duplicates: verdict.duplicates,
      'lanes that delivered, per process': [...lanesByProcess].map(([p, l]) => `${p} ${l.size}`).join(', '),
    });
    check(verdict.lost === 0, `${verdict.lost} committed events lost`);
    check(verdict.phantoms === 0, `${verdict.phantoms} phantom deliveries`);
    check(verdict.inversions === 0, `${verdict.inversions} inversions within a stream`);
    // A kill redelivers at most the turns it aborted: one batch of each lane the process held.
    check(
      verdict.duplicates <= BATCH * 16,
      `${verdict.duplicates} duplicates: more than one batch per lane (${BATCH * 16})`,
    );
  });
});

test('L2: 4 → 16 → 2 lanes while writers append: nothing lost, order kept per stream, redeliveries within a batch per old lane', async () => {
  await recorder.run('L2', 'Re-laning under load', ['I1', 'I2', 'I3'], async (figures) => {
    const schema = await freshSchema(db.sql, 'l2');
    const files = [join(dir, 'l2-a.jsonl'), join(dir, 'l2-b.jsonl')];
    const base = { schema, lanes: 4, concurrency: 8, batchSize: BATCH, handlerMs: 0 };
    const a = start({ ...base, file: files[0] as string, instanceId: 'l2-a', generation: 1 });
    const b = start({ ...base, file: files[1] as string, instanceId: 'l2-b', generation: 1 });
    await Promise.all([a.announced('LANES READY'), b.announced('LANES READY')]);
    const admin = createAdmin({ sql: db.sql, schema, defaultActor: 'l2' });
    const load = keyedWriters(db.sql, schema, 4, 202);
    const changes: string[] = [];
    for (const [at, lanes] of [
      [800, 16],
      [1_800, 2],
    ] as const) {
      await until(() => load.state.committed > at, 60_000, `the writers to commit ${at} events`);
      // A change still draining refuses another: asked again until it is through.
      const change = await until(
        async () =>
          admin.relane('keyed', { lanes }).catch((error: unknown) => {
            if ((error as { code?: string }).code === 'SLUICE_LANE_CHANGE_IN_PROGRESS') return undefined;
            throw error;
          }),
        60_000,
        `the change to ${lanes} lanes to be accepted`,
      );
      changes.push(`${change.from} → ${lanes} at barrier ${change.barrier ?? '?'}`);
    }
    await until(() => load.state.committed > 2_800, 60_000, 'the writers to commit 2,800 events');
    await load.stop();
    await caughtUp(schema);
    await Promise.all([stopCleanly(a), stopCleanly(b)]);

    const rows = await db.sql<{ instance_id: string }[]>`
      select instance_id from ${tables(db.sql, schema).consumers} where name = 'keyed' order by instance_id`;
    const seen = (await Promise.all(files.map(deliveries))).flat();
    const verdict = judge(await committedLog(schema), seen);
    Object.assign(figures, {
      changes: changes.join('; '),
      'lane rows at the end': rows.map((r) => r.instance_id).join(' '),
      'committed / rolled back': `${load.state.committed} / ${load.state.rolledBack}`,
      lost: verdict.lost,
      'inversions within a stream': verdict.inversions,
      duplicates: verdict.duplicates,
    });
    check(
      rows.length === 2 && rows.every((r) => r.instance_id.endsWith('/2')),
      'the consumer did not end on 2 lanes',
    );
    check(verdict.lost === 0, `${verdict.lost} committed events lost`);
    check(verdict.inversions === 0, `${verdict.inversions} inversions within a stream`);
    // Bounded by one batch per old lane (4 + 16), with no fault injected.
    check(
      verdict.duplicates <= BATCH * 20,
      `${verdict.duplicates} duplicates, more than one batch per old lane`,
    );
  });
});

test('L3: a parked key is replayed in order once its handler is fixed', async () => {
  await recorder.run('L3', 'A parked key replayed in order', ['I1', 'I2', 'I5'], async (figures) => {
    const schema = await freshSchema(db.sql, 'l3');
    const seen: EventRecord[] = [];
    let broken = true;
    const consumer = {
      name: 'keyed',
      lanes: 4,
      errorPolicy: { maxAttempts: 2, parkKey: true },
      handler: (event: EventRecord) => {
        if (broken && event.streamId === 'w0-7') throw new Error('template missing for w0-7');
        seen.push(event);
      },
    };
    // Two dispatchers on pools of their own, as two instances.
    const one = quietDispatcher(db.connect(), schema, [consumer], { instanceId: 'l3-a', retryDelayMs: 0 });
    const two = quietDispatcher(db.connect(), schema, [consumer], { instanceId: 'l3-b', retryDelayMs: 0 });
    await one.start();
    await two.start();
    try {
      const load = keyedWriters(db.sql, schema, 1, 303);
      await until(() => load.state.committed > 400, 60_000, 'the writer to commit 400 events');
      await load.stop();
      const admin = createAdmin({ sql: db.sql, schema, defaultActor: 'l3' });
      await until(
        async () => (await admin.listParkedKeys('keyed')).length === 1,
        30_000,
        'w0-7 to be parked',
      );
      await caughtUp(schema);
      const parked = await admin.listParkedEvents('keyed', { key: 'w0-7' });
      const log = await committedLog(schema);
      const keyIds = log.filter((e) => e.stream_id === 'w0-7').map((e) => BigInt(e.id));
      check(
        parked.map((e) => e.eventId).join() === keyIds.join(),
        `parked ${parked.map((e) => e.eventId).join()} is not the key's events ${keyIds.join()}`,
      );
      const others = judge(
        log.filter((e) => e.stream_id !== 'w0-7'),
        seen.map(asDelivery),
      );
      broken = false;
      await admin.replayParkedKey('keyed', { key: 'w0-7', reason: 'template restored' });
      await until(
        async () => (await admin.listParkedKeys('keyed')).length === 0,
        30_000,
        'the replay to finish',
      );
      const replayed = seen.filter((e) => e.streamId === 'w0-7').map((e) => e.id);
      Object.assign(figures, {
        'events of the parked key': keyIds.length,
        'other keys lost / inversions while it was parked': `${others.lost} / ${others.inversions}`,
        'replayed in order': replayed.join() === keyIds.join() ? 'yes' : 'no',
      });
      check(others.lost === 0, 'another key lost events while one was parked');
      check(replayed.join() === keyIds.join(), `replayed ${replayed.join()}, expected ${keyIds.join()}`);
    } finally {
      await one.stop();
      await two.stop();
    }
  });
});

function asDelivery(e: EventRecord): LaneDelivery {
  return { id: e.id.toString(), s: e.streamId, l: '?', p: 'in-process', t: Number(e.id) };
}

test('L4: two instances share 16 busy lanes about half and half', async () => {
  await recorder.run('L4', 'Lanes spread over instances', ['I9'], async (figures) => {
    const schema = await freshSchema(db.sql, 'l4');
    const files = [join(dir, 'l4-a.jsonl'), join(dir, 'l4-b.jsonl')];
    // A backlog that keeps every lane busy for seconds: 8,000 events over 160 streams, 10 ms a call.
    await db.sql.begin((tx) =>
      append(
        tx as unknown as TransactionSql,
        Array.from({ length: 8_000 }, (_, n) => ({ streamId: `s-${n % 160}`, type: 'Keyed', data: { n } })),
        { schema },
      ),
    );
    const base = { schema, lanes: 16, concurrency: 16, batchSize: 5, handlerMs: 10 };
    const a = start({ ...base, file: files[0] as string, instanceId: 'l4-a', generation: 1 });
    await a.announced('LANES READY');
    // The second instance joins while the first holds every lane, each of them still busy.
    await until(
      async () => (await deliveries(files[0] as string)).length > 500,
      60_000,
      'l4-a to be under way',
    );
    const b = start({ ...base, file: files[1] as string, instanceId: 'l4-b', generation: 1 });
    await b.announced('LANES READY');
    await caughtUp(schema);
    await Promise.all([stopCleanly(a), stopCleanly(b)]);
    // Which instance delivered each lane's events from l4-b's first delivery on.
    const seen = (await Promise.all(files.map(deliveries))).flat();
    const joined = Math.min(...seen.filter((d) => d.p.startsWith('l4-b')).map((d) => d.t));
    const after = seen.filter((d) => d.t >= joined);
    const byLane = new Map<string, Map<string, number>>();
    for (const d of after) {
      const lane = byLane.get(d.l) ?? new Map<string, number>();
      const process = d.p.split('#')[0] as string;
      lane.set(process, (lane.get(process) ?? 0) + 1);
      byLane.set(d.l, lane);
    }
    const mostly = (process: string) =>
      [...byLane.values()].filter((counts) => {
        const mine = counts.get(process) ?? 0;
        const total = [...counts.values()].reduce((x, y) => x + y, 0);
        return mine * 2 > total;
      }).length;
    const verdict = judge(await committedLog(schema), seen);
    Object.assign(figures, {
      'lanes mostly served by l4-a / l4-b once l4-b joined': `${mostly('l4-a')} / ${mostly('l4-b')}`,
      'deliveries by l4-a / l4-b once l4-b joined': `${after.filter((d) => d.p.startsWith('l4-a')).length} / ${after.filter((d) => d.p.startsWith('l4-b')).length}`,
      lost: verdict.lost,
      'inversions within a stream': verdict.inversions,
    });
    check(verdict.lost === 0, `${verdict.lost} committed events lost`);
    check(verdict.inversions === 0, `${verdict.inversions} inversions within a stream`);
    for (const process of ['l4-a', 'l4-b']) {
      const lanes = mostly(process);
      check(lanes >= 5 && lanes <= 11, `${process} mostly served ${lanes} of 16 lanes: not about half`);
    }
  });
});

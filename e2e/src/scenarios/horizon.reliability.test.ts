// docs/reliability.md §5, G5 and R3: the cluster-wide horizon (pg_snapshot_xmin). G5: a writer idle in
// transaction in ANOTHER database and an orphan PREPARE TRANSACTION hold it; a pending gap must not
// burn (I8), the stall must be reported naming the pid and the gid (diagnose and the
// sluice.gaps.oldest_age metric), and once released the gap burns within one or two passes.
// R3: a handler that never settles must not hold the horizon longer than handlerTimeoutMs.
import { setTimeout as sleep } from 'node:timers/promises';
import { randomBytes } from 'node:crypto';
import { createAdmin } from '@sluice/admin';
import { ATTR, METRIC, type Consumer, type EventRecord } from '@sluice/core';
import {
  appendEvents,
  consumerRow,
  freshSchema,
  holdGap,
  recordingConsumer,
  until,
  withDatabase,
} from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import postgres from 'postgres';
import { afterAll, expect, test } from 'vitest';
import { profile } from '../report/results.js';
import {
  check,
  gapRows,
  head,
  metricsProbe,
  quantile,
  quietDispatcher,
  round,
  ScenarioRecorder,
} from './support.js';

const db = await useTestDatabase();
const recorder = new ScenarioRecorder('scenarios-horizon');
const SOAK = profile() === 'soak';
const quiet = { onnotice: () => undefined } as const;

afterAll(async () => {
  await recorder.write(db.sql);
});

test('G5: a horizon held in another database and by an orphan prepared transaction stalls the gap, is reported, then burns', async () => {
  await recorder.run(
    'G5',
    'Horizon held elsewhere (other database, orphan PREPARE TRANSACTION)',
    ['I8', 'I9'],
    async (figures) => {
      const holdMs = SOAK ? 120_000 : 5_000;
      const pollMs = 100;
      const schema = await freshSchema(db.sql, 'g5');
      const suffix = randomBytes(4).toString('hex');
      const foreignDb = `g5_foreign_${suffix}`;
      const gid = `sluice-g5-orphan-${suffix}`;
      await db.sql`create database ${db.sql(foreignDb)}`;
      const foreign = postgres(withDatabase(db.url, foreignDb), {
        max: 1,
        ...quiet,
        connection: { application_name: 'g5-foreign-writer' },
      });
      let foreignOpen = false;
      let prepared = false;
      const foreignTx = await foreign.reserve();
      const pool = db.connect({ max: 6, connection: { application_name: 'g5-dispatcher' } });
      try {
        // 1. The holders: a writer idle in transaction in another database, and an orphan prepared transaction.
        await foreignTx`create table ledger (x int)`;
        await foreignTx`begin`;
        foreignOpen = true;
        await foreignTx`insert into ledger values (1)`;
        const [foreignRow] = await foreignTx<{ pid: number; xid: string }[]>`
        select pg_backend_pid() as pid, pg_current_xact_id()::text as xid`;
        const foreignPid = foreignRow!.pid;
        await db.sql`create table ${db.sql(`${schema}.two_phase`)} (x int)`;
        const preparing = await db.sql.reserve();
        try {
          await preparing`begin`;
          await preparing`insert into ${preparing(`${schema}.two_phase`)} values (1)`;
          // The gid cannot be a bind parameter; it is a fixed literal of this test.
          await preparing.unsafe(`prepare transaction '${gid}'`);
          prepared = true;
        } finally {
          preparing.release();
        }
        figures['foreign writer pid'] = foreignPid;
        figures['prepared gid'] = gid;

        // 2. A consumer with a pending gap: a writer owns id g, g+1 commits, a turn passes g; the
        // writer then rolls back, so from here on only the two holders keep the gap from burning.
        const probe = metricsProbe();
        const c = recordingConsumer('g5-consumer');
        const dispatcher = quietDispatcher(pool, schema, [c.consumer], {
          meterProvider: probe.meterProvider,
        });
        await dispatcher.ensureRegistered();
        const admin = createAdmin({ sql: db.sql, schema });
        const attrs = { [ATTR.consumer]: 'g5-consumer' };
        const appended: bigint[] = [];
        const gap = await holdGap(db.sql, undefined, { schema });
        appended.push(...(await appendEvents(db.sql, 1, undefined, schema)).map((e) => e.id));
        await dispatcher.runOnce();
        await gap.release({ commit: false });
        const stallStart = performance.now();
        await dispatcher.runOnce(); // fences the range with this turn's xid
        const [range] = await gapRows(db.sql, schema, 'g5-consumer');
        check(
          range !== undefined && range.from === gap.id && range.to === gap.id,
          `expected the gap {${gap.id}}`,
        );
        figures['gap'] = `${gap.id} (fence ${range.fence})`;

        // 3. Held: passes at the poll interval; nothing burns; the stall is reported; delivery goes on.
        let passes = 2;
        let diagnosedAt: number | undefined;
        let metricAt: number | undefined;
        let finding = '';
        let burnsWhileBlocked = 0;
        let oldestAge = 0;
        while (performance.now() - stallStart < holdMs) {
          if (passes % 5 === 0)
            appended.push(...(await appendEvents(db.sql, 1, undefined, schema)).map((e) => e.id));
          await dispatcher.runOnce();
          passes += 1;
          const ranges = await gapRows(db.sql, schema, 'g5-consumer');
          if (!ranges.some((r) => r.from === gap.id && r.to === gap.id)) burnsWhileBlocked += 1;
          burnsWhileBlocked += (await probe.value(METRIC.gapsBurnt, attrs)) ?? 0;
          if (diagnosedAt === undefined) {
            const diagnosis = await admin.diagnose('g5-consumer');
            const heldBy = diagnosis.oldestGap?.heldBy ?? [];
            const text = diagnosis.findings.join('\n');
            if (
              heldBy.some((b) => b.pid === foreignPid) &&
              heldBy.some((b) => b.preparedGid === gid) &&
              text.includes(`pid ${foreignPid}`) &&
              text.includes(`prepared transaction "${gid}"`)
            ) {
              diagnosedAt = performance.now();
              finding = diagnosis.findings.find((f) => f.includes('pending gap')) ?? '';
            }
          }
          const pending = await probe.value(METRIC.gapsPending, attrs);
          oldestAge = (await probe.value(METRIC.gapsOldestAge, attrs)) ?? 0;
          if (metricAt === undefined && pending === 1 && oldestAge > 0) metricAt = performance.now();
          await sleep(pollMs);
        }
        const heldForS = (performance.now() - stallStart) / 1000;
        const latencyS = (at: number | undefined) =>
          at === undefined ? Number.POSITIVE_INFINITY : (at - stallStart) / 1000;
        figures['held for (s)'] = round(heldForS, 1);
        figures['passes while blocked'] = passes;
        figures['burns while blocked'] = burnsWhileBlocked;
        figures['stall report latency, diagnose (s)'] = round(latencyS(diagnosedAt), 2);
        figures['stall report latency, sluice.gaps.oldest_age (s)'] = round(latencyS(metricAt), 2);
        figures['sluice.gaps.oldest_age at release (s)'] = round(oldestAge, 1);
        figures['diagnose finding'] = finding;
        expect(burnsWhileBlocked).toBe(0);
        expect(latencyS(diagnosedAt)).toBeLessThanOrEqual(30);
        expect(latencyS(metricAt)).toBeLessThanOrEqual(30);
        // The gauge tracks the stall: its age is the time since the gap was observed (one pass of slack).
        expect(oldestAge).toBeGreaterThanOrEqual(heldForS - 1);
        await dispatcher.runOnce();
        expect((await consumerRow(db.sql, schema, 'g5-consumer')).cursor).toBe(await head(db.sql, schema));
        const deliveredWhileBlocked = c.ids().length;

        // 4. Release the foreign writer only: still held by the prepared transaction.
        await foreignTx`rollback`;
        foreignOpen = false;
        // Three passes after the rollback (each takes its snapshot after it): each finds the gap pending.
        for (let i = 0; i < 3; i++) {
          const pass = await dispatcher.runOnce();
          expect(pass.byConsumer['g5-consumer']?.pendingGaps).toBe(1);
        }
        const stillHeld = await gapRows(db.sql, schema, 'g5-consumer');
        const afterForeign = await admin.diagnose('g5-consumer');
        const heldByAfterForeign = afterForeign.oldestGap?.heldBy ?? [];
        figures['held by after the foreign rollback'] = heldByAfterForeign
          .map((b) => (b.preparedGid === null ? `pid ${b.pid}` : `gid ${b.preparedGid}`))
          .join(', ');
        expect(stillHeld.map((r) => r.from)).toEqual([gap.id]);
        expect(heldByAfterForeign.map((b) => b.preparedGid)).toEqual([gid]);

        // 5. ROLLBACK PREPARED: the gap burns within one or two passes.
        await db.sql.unsafe(`rollback prepared '${gid}'`);
        prepared = false;
        let passesToBurn = 0;
        while ((await gapRows(db.sql, schema, 'g5-consumer')).length > 0 && passesToBurn < 20) {
          await dispatcher.runOnce();
          passesToBurn += 1;
        }
        figures['passes to burn after release'] = passesToBurn;
        figures['ids burnt (metric)'] = (await probe.value(METRIC.gapsBurnt, attrs)) ?? 0;
        expect(passesToBurn).toBeGreaterThanOrEqual(1);
        expect(passesToBurn).toBeLessThanOrEqual(2);
        expect(await probe.value(METRIC.gapsBurnt, attrs)).toBe(1);

        await dispatcher.runOnce();
        const delivered = c.ids();
        figures['events delivered (while blocked / total)'] = `${deliveredWhileBlocked}/${delivered.length}`;
        figures['lost'] = appended.filter((id) => !delivered.includes(id)).length;
        figures['duplicated'] = delivered.length - new Set(delivered).size;
        expect(delivered).toEqual(appended);
        expect(deliveredWhileBlocked).toBe(appended.length); // the stall never blocked other events
        await dispatcher.stop();
      } finally {
        if (foreignOpen) await foreignTx`rollback`.catch(() => undefined);
        foreignTx.release();
        await foreign.end({ timeout: 1 });
        if (prepared) await db.sql.unsafe(`rollback prepared '${gid}'`).catch(() => undefined);
        await db.sql`drop database if exists ${db.sql(foreignDb)} with (force)`;
      }
    },
  );
});

interface HorizonSample {
  readonly pid: number;
  readonly ageMs: number;
}

/** Samples pg_stat_activity for transactions with an xid on `application`'s backends: the horizon they hold. */
function horizonWatch(application: string) {
  const run = { stopped: false };
  let maxAgeMs = 0;
  let samples = 0;
  let lastHeldAt = 0;
  const loop = (async () => {
    while (!run.stopped) {
      const rows = await db.sql<HorizonSample[]>`
        select pid, (extract(epoch from clock_timestamp() - xact_start) * 1000)::float8 as "ageMs"
        from pg_stat_activity
        where application_name = ${application} and backend_xid is not null`;
      samples += 1;
      for (const row of rows) maxAgeMs = Math.max(maxAgeMs, row.ageMs);
      if (rows.length > 0) lastHeldAt = performance.now();
      await sleep(10);
    }
  })();
  return {
    get lastHeldAt() {
      return lastHeldAt;
    },
    async stop() {
      run.stopped = true;
      await loop;
      return { maxAgeMs, samples };
    },
  };
}

type HangKind = 'promise' | 'transactional promise' | 'transactional pg_sleep';

for (const kind of [
  'promise',
  'transactional promise',
  'transactional pg_sleep',
] as const satisfies readonly HangKind[]) {
  test(`R3 (${kind}): a handler that never settles holds the horizon at most handlerTimeoutMs; dead per policy; others unaffected`, async () => {
    const id = kind === 'promise' ? 'R3' : kind === 'transactional promise' ? 'R3-tx' : 'R3-sql';
    await recorder.run(id, `Handler hangs forever (${kind})`, ['I3', 'I9'], async (figures) => {
      const handlerTimeoutMs = 1_500;
      const statementTimeoutMs = 3_000;
      const maxAttempts = 2;
      const application = `r3-${randomBytes(3).toString('hex')}`;
      const schema = await freshSchema(db.sql, 'r3');
      const calls: number[] = [];
      const hung: Consumer = {
        name: 'r3-hung',
        transactional: kind !== 'promise',
        errorPolicy: { maxAttempts },
        handler: async (_event: EventRecord, ctx) => {
          calls.push(performance.now());
          if (kind === 'transactional pg_sleep') await ctx.tx!`select pg_sleep(3600)`;
          await new Promise(() => undefined);
        },
      };
      const committedAt = new Map<bigint, number>();
      const latencies: number[] = [];
      const bystanderAt: number[] = [];
      const bystander = recordingConsumer('r3-bystander', {
        handler: (event: EventRecord) => {
          bystander.seen.push(event);
          bystanderAt.push(performance.now());
          const at = committedAt.get(event.id);
          if (at !== undefined) latencies.push(performance.now() - at);
        },
      });
      const pool = db.connect({ max: 8, connection: { application_name: application } });
      const dispatcher = quietDispatcher(pool, schema, [hung, bystander.consumer], {
        pollIntervalMs: 50,
        handlerTimeoutMs,
        statementTimeoutMs,
        retryDelayMs: 0,
        rearmCooldownMs: 3_600_000,
      });
      const watch = horizonWatch(application);
      const writer = db.connect({ max: 1 });
      const appended: bigint[] = [];
      const started = performance.now();
      try {
        await dispatcher.start();
        // Events keep arriving for the bystander while the hung consumer burns its attempts.
        let deadAt: number | undefined;
        while (deadAt === undefined) {
          const [event] = await appendEvents(writer, 1, undefined, schema);
          committedAt.set(event!.id, performance.now());
          appended.push(event!.id);
          if ((await consumerRow(db.sql, schema, 'r3-hung')).status === 'dead') deadAt = performance.now();
          check(performance.now() - started < 60_000, 'r3-hung is not dead after 60 s');
          await sleep(100);
        }
        await until(() => bystander.seen.length === appended.length, 10_000, 'the bystander to catch up');
        // The horizon is free again once no backend of ours keeps an xid.
        await until(() => performance.now() - watch.lastHeldAt > 300, 10_000, 'the horizon to be free');
        figures['time to dead (ms)'] = round(deadAt - started);
      } finally {
        await dispatcher.stop();
        await writer.end();
      }
      const { maxAgeMs, samples } = await watch.stop();
      const state = await consumerRow(db.sql, schema, 'r3-hung');
      const bound =
        (kind === 'transactional pg_sleep'
          ? Math.max(handlerTimeoutMs, statementTimeoutMs)
          : handlerTimeoutMs) + 1_000;
      figures['handlerTimeoutMs / statementTimeoutMs'] = `${handlerTimeoutMs} / ${statementTimeoutMs}`;
      figures['handler calls'] = calls.length;
      figures['longest transaction with an xid (ms)'] = round(maxAgeMs);
      figures['bound checked (ms)'] = bound;
      figures['pg_stat_activity samples'] = samples;
      figures['status / attempts'] = `${state.status} / ${state.attempts}`;
      figures['last error'] = state.lastError ?? '';
      figures['bystander events'] = `${bystander.seen.length}/${appended.length}`;
      figures['bystander latency p50/max (ms)'] =
        `${round(quantile(latencies, 0.5))}/${round(Math.max(...latencies))}`;

      expect(calls).toHaveLength(maxAttempts); // retried per policy, then dead without another call
      expect(state).toMatchObject({ status: 'dead', attempts: maxAttempts, stuckEventId: appended[0] });
      expect(state.cursor).toBe(0n); // I5: frozen before the event
      expect(maxAgeMs).toBeLessThanOrEqual(bound);
      expect(bystander.ids()).toEqual(appended); // others unaffected: everything, once, in order
      // Never waited behind the hung turn: while each hung call was running, the bystander got events.
      const blockedCalls = calls.filter(
        (at) => !bystanderAt.some((t) => t > at && t < at + handlerTimeoutMs),
      );
      figures['hung calls without a bystander delivery meanwhile'] = blockedCalls.length;
      expect(blockedCalls).toHaveLength(0);
    });
  });
}

import { append, DEFAULTS, transaction, type Dispatcher } from '@sluice/core';
import { pgArray } from '@sluice/core/internal';
import { holdGap } from '@sluice/testing';
import { statementProfile } from '../harness/counters.js';
import { FullGcWatch, GcPauses } from '../harness/gc.js';
import { EVENT_TYPE, payload, streamOf } from '../harness/payload.js';
import { progress } from '../harness/progress.js';
import { emptySluiceTemplate } from '../harness/templates.js';
import { IDLE_SYSTEMS } from '../names.js';
import { RowCollector, type ScenarioResult, type StatementProfile } from '../report/types.js';
import { minimalBatch, registerCursors } from '../systems/baselines.js';
import { benchConsumers, benchDispatcher, pool } from '../systems/sluice.js';
import { rotate, runDatabase, sleep, type ScenarioContext } from './context.js';

const SETTLE_MS = 1500;

/**
 * Scenario 4: a process with 100 caught-up consumers, 10 of them with a pending gap that a long
 * transaction keeps from resolving, left alone: what does idling cost the database and Node?
 */
export async function idleCost(ctx: ScenarioContext): Promise<ScenarioResult> {
  const { config } = ctx;
  const { consumers, withGaps, seconds, gcQuietMs, gcSettleMaxMs } = config.idle;
  const rows = new RowCollector('idle');
  const profiles: StatementProfile[] = [];
  const template = await emptySluiceTemplate(ctx);
  const pollIntervalMs = DEFAULTS.pollIntervalMs;
  const ticks = (seconds * 1000) / pollIntervalMs;

  for (let run = 0; run < config.runs; run++) {
    for (const system of rotate(Object.values(IDLE_SYSTEMS), run)) {
      progress(
        `idle: ${consumers} consumers (${withGaps} with a held gap), ${system}, run ${run + 1}/${config.runs}`,
      );
      const db = await runDatabase(ctx, template, 'idle');
      let counting = false;
      let clientStatements = 0;
      const debug = () => {
        if (counting) clientStatements++;
      };
      const sql = pool(db.url, 10, { debug });
      const writer = pool(db.url, 2);
      let deliveries = 0;
      const definitions = benchConsumers(consumers, () => {
        deliveries++;
      });
      const names = definitions.map((c) => c.name);
      let dispatcher: Dispatcher | undefined;
      // The baselines poll on a timer; a tick still running when the next is due is not doubled.
      let pollTimer: NodeJS.Timeout | undefined;
      let polling: Promise<unknown> | undefined;
      const pollEvery = (label: string, work: () => Promise<unknown>) => {
        pollTimer = setInterval(() => {
          polling ??= work()
            .catch((error: unknown) => {
              process.stderr.write(`[${label}] ${(error as Error).message}\n`);
            })
            .finally(() => {
              polling = undefined;
            });
        }, pollIntervalMs);
      };
      let release: (() => Promise<void>) | undefined;
      let gapsHeld = Number.NaN;
      try {
        // A small log everyone has processed.
        await transaction(writer, (tx) =>
          append(
            tx,
            Array.from({ length: 100 }, (_, seq) => ({
              streamId: streamOf(seq),
              type: EVENT_TYPE,
              data: payload(seq),
            })),
          ),
        );
        if (system === IDLE_SYSTEMS.sluice) {
          dispatcher = benchDispatcher(sql, definitions);
          await dispatcher.ensureRegistered();
          while ((await dispatcher.runOnce()).processed > 0) {
            // catching up on the 100 events
          }
          // The held gap: a long transaction owns id h+1 while h+2 commits.
          const held = await holdGap(writer, { streamId: 'held', type: EVENT_TYPE, data: payload(100) });
          release = () => held.release({ commit: false });
          const [after] = await transaction(writer, (tx) =>
            append(tx, [{ streamId: streamOf(101), type: EVENT_TYPE, data: payload(101) }]),
          );
          const head = after?.id ?? 0n;
          const gapNames = names.slice(0, withGaps);
          const gapDispatcher = benchDispatcher(sql, definitions.slice(0, withGaps), { listen: false });
          await gapDispatcher.ensureRegistered();
          for (let i = 0; i < 20; i++) {
            await gapDispatcher.runOnce();
            const [state] = await sql<{ ready: number }[]>`
              select count(*)::int as ready from sluice.consumers
              where name = any(${pgArray(gapNames)}::text[]) and cursor >= ${head.toString()}::bigint
                and gap_count > 0 and gaps_unfenced = 0`;
            if (state?.ready === withGaps) break;
          }
          // The other consumers are put at the head directly (they never see the held id: it is
          // rolled back at the end, so their state stays consistent).
          await sql`
            update sluice.consumers set cursor = ${head.toString()}::bigint
            where name <> all(${pgArray(gapNames)}::text[])`;
          await dispatcher.start();
        } else if (system === IDLE_SYSTEMS.floor) {
          // The least any poller can do: one trivial statement per tick from the same pool.
          pollEvery('floor', () => sql`select 1`);
        } else {
          await registerCursors(sql, names, 100n);
          pollEvery('minimal loop', () =>
            Promise.all(
              names.map((name) =>
                minimalBatch(sql, name, DEFAULTS.batchSize, () => {
                  deliveries++;
                }),
              ),
            ),
          );
        }
        const fullGcs = new FullGcWatch();
        await sleep(SETTLE_MS);
        // The minimal loop is not idle (it polls every consumer): its GC never goes quiet.
        const settled = await fullGcs.settled(system === IDLE_SYSTEMS.minimal ? 0 : gcQuietMs, gcSettleMaxMs);

        const deliveredBefore = deliveries;
        const meter = db.meter();
        clientStatements = 0;
        counting = true;
        const gc = new GcPauses();
        await meter.start();
        gc.from = performance.now();
        await sleep(seconds * 1000);
        gc.to = performance.now();
        counting = false;
        const m = await meter.stop();
        gc.stop();
        const window = m.wallMs / 1000;

        if (ctx.pgStatStatements && run === config.runs - 1) {
          profiles.push({
            label: `${system}, ${consumers} idle consumers (${window.toFixed(1)} s window)`,
            per: `poll tick (${pollIntervalMs} ms)`,
            divisor: m.wallMs / pollIntervalMs,
            rows: await statementProfile(ctx.admin, db.oid, 6),
          });
        }
        if (system === IDLE_SYSTEMS.sluice) {
          const [state] = await sql<{ n: number }[]>`
            select count(*)::int as n from sluice.consumers where gap_count > 0`;
          gapsHeld = state?.n ?? 0;
        }
        const statementsPerSecond = m.statements === undefined ? undefined : m.statements / window;
        rows.add(
          `${consumers} idle consumers, ${withGaps} with a held gap`,
          system,
          [
            { name: 'statements/s', unit: '', value: statementsPerSecond },
            {
              name: 'statements per poll tick',
              unit: '',
              // The poll timer fired at most ceil(window / interval) times in the window.
              value:
                m.statements === undefined ? undefined : m.statements / Math.ceil(m.wallMs / pollIntervalMs),
            },
            { name: 'statements/s counted by the client', unit: '', value: clientStatements / window },
            { name: 'write transactions', unit: '', value: m.writeTransactions },
            { name: 'WAL', unit: 'bytes/s', value: m.walBytes / window },
            { name: 'PostgreSQL CPU', unit: '% of a core', value: m.pgCpuPercent },
            { name: 'Node CPU', unit: '% of a core', value: m.nodeCpuPercent },
            { name: 'GC pause in the window', unit: 'ms', value: gc.totalMs },
            { name: 'waited for GC to settle', unit: 's', value: settled.waitedMs / 1000 },
            ...(system === IDLE_SYSTEMS.sluice
              ? [{ name: 'consumers with a pending gap', unit: '', value: gapsHeld }]
              : []),
          ],
          // Nothing was appended during the window: any delivery is a duplicate.
          { lost: 0, duplicated: deliveries - deliveredBefore },
        );
        progress(
          `  ${statementsPerSecond === undefined ? '?' : statementsPerSecond.toFixed(1)} statements/s, ${m.writeTransactions} write transactions, ` +
            `PostgreSQL ${m.pgCpuPercent?.toFixed(2) ?? '?'}% / Node ${m.nodeCpuPercent.toFixed(2)}% of a core ` +
            `(GC ${gc.totalMs.toFixed(1)} ms in the window, after waiting ${(settled.waitedMs / 1000).toFixed(1)} s for GC to settle${settled.quiet ? '' : ', in vain'})`,
        );
      } finally {
        clearInterval(pollTimer);
        await polling;
        await dispatcher?.stop();
        await release?.();
        await writer.end();
        await sql.end();
        await db.drop();
      }
    }
  }

  return {
    scenario: 'idle',
    title: `Idle cost: ${consumers} idle consumers in one process (${withGaps} with a pending gap held open by a long transaction), ${seconds} s`,
    rows: rows.rows(),
    profiles,
    notes: [
      `Sluice: one dispatcher with ${consumers} consumers at default options (pollIntervalMs ${pollIntervalMs}, LISTEN on), all caught up. ` +
        `${withGaps} of them passed an id owned by a transaction that stays open for the whole window (their gap is fenced and cannot resolve); ` +
        `the other ${consumers - withGaps} had their cursor moved to the head directly, so they never saw that id (it is rolled back at the end). ` +
        `Measured for ${seconds} s after ${SETTLE_MS / 1000} s of settling` +
        (gcQuietMs > 0
          ? `, once a full GC had run after the setup and none for ${gcQuietMs / 1000} s since (at most ${gcSettleMaxMs / 1000} s after the setup): V8's memory reducer collects a busy phase's garbage in full GCs once allocation slows down, ` +
            'seconds after it: a one-off cost of the setup (for Sluice, catching up the consumers) that would otherwise land in the window. How long each run waited is shown ("waited for GC to settle"). ' +
            'The GC that still ran inside the window is shown. Not for the minimal loop, which is busy polling every consumer and never quiet.'
          : " (this mode does not wait for the GC to settle: a full GC collecting the setup's garbage may land in the window)."),
      `One poll tick = ${pollIntervalMs} ms (${ticks} ticks in the window; per tick = statements ÷ the ticks that fit in the window's measured length, rounded up). Statements: pg_stat_statements calls in the run database; the client count is postgres.js' debug hook on the dispatcher's pool. ` +
        "Write transactions: xids assigned in the whole cluster during the window (0 = nothing wrote). WAL includes the server's own background writes.",
      'Minimal loop: the catch-up baseline with no wake-up, each of the 100 consumers running its transaction every 100 ms (what "poll every consumer" costs).',
      `Floor: no consumer at all, \`select 1\` every ${pollIntervalMs} ms from a pool like Sluice's: what one statement per tick costs this machine (a timer, a round trip, a backend waking up), whatever the statement.`,
      'PostgreSQL CPU: every server process, read from /proc/<pid>/schedstat (time on the CPU in ns; the 10 ms clock ticks of /proc/<pid>/stat are too coarse at this level), exited children through the postmaster. Node CPU: process.cpuUsage() of the scenario process.',
    ],
  };
}

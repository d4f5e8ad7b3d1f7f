import { availableParallelism } from 'node:os';
import { DEFAULTS } from '@sluice/core';
import { formatNumber, summarize } from '../harness/stats.js';
import {
  APPEND_SYSTEMS,
  CATCH_UP_LANES,
  CATCH_UP_SYSTEMS as C,
  IDLE_SYSTEMS,
  LATENCY_SYSTEMS as L,
  PROJECTION_CASE,
  REBUILD_SYSTEMS as R,
  SLOW_HANDLER_SYSTEMS as S,
  slowHandlerCase,
} from '../names.js';
import { pairwise, runsOf } from './find.js';
import { evaluateTargets } from './targets.js';
import type { ScenarioId, ScenarioResult } from './types.js';

/**
 * For every scenario with a missed target: the figures of this run that locate the bottleneck.
 * Everything stated here is computed from this run's measurements (and the statement tables under
 * each scenario); nothing is carried over from an earlier run or read from the code.
 */
export function bottlenecks(results: readonly ScenarioResult[]): string[] {
  const missed = new Set(
    evaluateTargets(results)
      .filter((t) => t.met === false)
      .map((t) => t.scenario),
  );
  const find = (scenario: ScenarioId, caseName: string | undefined, system: string, figure: string) =>
    runsOf(results, scenario, caseName, system, figure) ?? [];
  const med = (scenario: ScenarioId, caseName: string | undefined, system: string, figure: string): number =>
    summarize(find(scenario, caseName, system, figure)).median;
  // Ratios as the targets take them: run by run, then the median.
  const pairMedian = (
    scenario: ScenarioId,
    caseName: string | undefined,
    a: string,
    b: string,
    figure: string,
    op: (x: number, y: number) => number,
  ): number =>
    summarize(pairwise(find(scenario, caseName, a, figure), find(scenario, caseName, b, figure), op) ?? [])
      .median;
  const ratio = (x: number, y: number) => x / y;
  const n = (value: number) => formatNumber(value);
  const x = (value: number) => (Number.isFinite(value) ? `${value.toFixed(2)}×` : 'n/a');
  const list = (values: readonly number[]) => values.map(n).join(', ');
  const moreOrLess = (us: number) => (us < 0 ? `${n(-us)} µs less` : `${n(us)} µs more`);
  const out: string[] = [];

  if (missed.has('catch-up')) {
    const f = (caseName: string, system: string, figure: string) => med('catch-up', caseName, system, figure);
    const one = '1 consumer';
    const sl = (figure: string) => f(one, C.sluice, figure);
    const ml = (figure: string) => f(one, C.minimal, figure);
    const busy = sl('PostgreSQL CPU') + sl('Node CPU');
    const raw10 = f('10 consumers', C.raw, 'total');
    const minimal10 = f('10 consumers', C.minimal, 'total');
    out.push(
      '### Catch-up',
      '',
      `- **Round trips and commits.** Per 100 events Sluice (1 consumer) sent ${n(sl('statements sent per 100 events'))} statements and ran ` +
        `${n(sl('write transactions per 100 events'))} write transactions; the minimal loop ${n(ml('statements sent per 100 events'))} and ` +
        `${n(ml('write transactions per 100 events'))}; the raw scan ${n(f(one, C.raw, 'statements sent per 100 events'))} and none. ` +
        'Each statement is a round trip the turn waits for, each write transaction a WAL flush; which statements they are, with their mean time, ' +
        'is in the statement table under the catch-up scenario.',
      `- **CPU.** PostgreSQL ${n(sl('PostgreSQL CPU per event'))} µs and Node ${n(sl('Node CPU per event'))} µs of CPU per event for Sluice, ` +
        `${n(ml('PostgreSQL CPU per event'))} µs and ${n(ml('Node CPU per event'))} µs for the minimal loop; during the drain the two used ${n(busy)} % ` +
        `of the ${100 * availableParallelism()} % that ${availableParallelism()} cores offer (mind the load average in the header: other work competes for the same cores).`,
      `- **Start-up.** Sluice's first delivery came ${n(sl('first delivery after start'))} ms after start() (start() itself took ${n(sl('start() took'))} ms), ` +
        `the minimal loop's ${n(ml('first delivery after start'))} ms after its start; at this backlog that is about ${n((100 * sl('first delivery after start') * sl('total')) / (1000 * sl('backlog')))} % ` +
        'of the time Sluice took, and it is counted in its events/s.',
      `- **The turn-start record.** Sluice wrote ${n(sl('turn-start records per 100 events'))} turn-start records per 100 events (a turn writes one only without a clean view of its consumer, docs/design.md §4.7). ` +
        `Never writing one (countCrashedAttempts: false, diagnostic row) it drained ${n(f(one, C.sluiceNoCrash, 'total'))} events/s, ` +
        `${x(pairMedian('catch-up', one, C.sluiceNoCrash, C.minimal, 'total', ratio))} the minimal loop, against ${x(pairMedian('catch-up', one, C.sluice, C.minimal, 'total', ratio))} with the default.`,
      `- **Read-ahead.** A turn whose batch came back full reads the next batch on another pool connection while it delivers and commits, ` +
        'while a turn slot is free (the read takes a connection beyond the turns). Sluice runs one consumer at its default concurrency; ' +
        `with one slot (diagnostic row) every turn fetches for itself: ${n(f(one, C.sluiceOneSlot, 'total'))} events/s, ` +
        `${x(pairMedian('catch-up', one, C.sluiceOneSlot, C.raw, 'total', ratio))} the raw scan.`,
      `- **graphile-worker.** Sluice drained ${x(pairMedian('catch-up', one, C.sluice, C.graphile, 'total', ratio))} graphile-worker's rate ` +
        `(${n(f(one, C.graphile, 'total'))} events/s); graphile-worker used ${n(f(one, C.graphile, 'PostgreSQL CPU per event'))} µs of PostgreSQL CPU and ` +
        `${n(f(one, C.graphile, 'WAL per event'))} bytes of WAL per event (a job row per event, inserted before the drain, then locked and deleted), ` +
        `Sluice ${n(sl('PostgreSQL CPU per event'))} µs and ${n(sl('WAL per event'))} bytes.`,
      `- **One row per event.** Sluice's transactional consumer wrote ${n(f(PROJECTION_CASE, C.sluiceTransactional, 'total'))} events/s, ` +
        `the minimal loop writing the same rows ${n(f(PROJECTION_CASE, C.minimalWriting, 'total'))} ` +
        `(${x(pairMedian('catch-up', PROJECTION_CASE, C.sluiceTransactional, C.minimalWriting, 'total', ratio))}). Per 100 events Sluice sent ` +
        `${n(f(PROJECTION_CASE, C.sluiceTransactional, 'statements sent per 100 events'))} statements, of them ${n(f(PROJECTION_CASE, C.sluiceTransactional, 'savepoints per 100 events'))} savepoints ` +
        `(one per batch, docs/design.md §4.6) and ${n(f(PROJECTION_CASE, C.sluiceTransactional, 'turn-start records per 100 events'))} turn-start records, and ran ` +
        `${n(f(PROJECTION_CASE, C.sluiceTransactional, 'write transactions per 100 events'))} write transactions; the minimal loop ` +
        `${n(f(PROJECTION_CASE, C.minimalWriting, 'statements sent per 100 events'))} and ${n(f(PROJECTION_CASE, C.minimalWriting, 'write transactions per 100 events'))}. ` +
        `Node CPU per event: Sluice ${n(f(PROJECTION_CASE, C.sluiceTransactional, 'Node CPU per event'))} µs, the minimal loop ${n(f(PROJECTION_CASE, C.minimalWriting, 'Node CPU per event'))} µs; ` +
        `PostgreSQL ${n(f(PROJECTION_CASE, C.sluiceTransactional, 'PostgreSQL CPU per event'))} µs and ${n(f(PROJECTION_CASE, C.minimalWriting, 'PostgreSQL CPU per event'))} µs.`,
      `- **Ten consumers.** Sluice ${n(f('10 consumers', C.sluice, 'total'))} events/s in total, the minimal loop ${n(minimal10)}, ten raw scans ${n(raw10)} ` +
        `(one raw scan: ${n(f(one, C.raw, 'total'))}). Consumers of one dispatcher turning from the same cursor share each full batch ` +
        '(one fetch for all of them, dispatcher/shared-reads.ts), so Sluice is not bound by ten reads of the same events; ' +
        `ten independent raw scans ${raw10 < 2 * minimal10 ? 'stay below' : 'exceed'} 2× the minimal loop.`,
      `- **${CATCH_UP_LANES} lanes.** One consumer run as ${CATCH_UP_LANES} lanes drained ${n(f(one, C.sluiceLanes, 'total'))} events/s ` +
        `(${x(pairMedian('catch-up', one, C.sluiceLanes, C.sluice, 'total', ratio))} one lane, run by run), with ${n(f(one, C.sluiceLanes, 'PostgreSQL CPU per event'))} µs of PostgreSQL CPU per event ` +
        `against ${n(sl('PostgreSQL CPU per event'))} µs (${x(pairMedian('catch-up', one, C.sluiceLanes, C.sluice, 'PostgreSQL CPU per event', ratio))}) and ` +
        `${n(f(one, C.sluiceLanes, 'Node CPU per event'))} µs of Node CPU against ${n(sl('Node CPU per event'))} µs; PostgreSQL was busy ${n(f(one, C.sluiceLanes, 'PostgreSQL CPU'))} % of a core ` +
        `(${n(sl('PostgreSQL CPU'))} % with one lane). Per 100 events the lanes sent ${n(f(one, C.sluiceLanes, 'statements sent per 100 events'))} statements and ran ` +
        `${n(f(one, C.sluiceLanes, 'write transactions per 100 events'))} write transactions (one lane: ${n(sl('statements sent per 100 events'))} and ${n(sl('write transactions per 100 events'))}). ` +
        'The lanes share group reads (docs/design.md §11.2: one lane reads the events above its cursor, the others take what follows theirs from that batch), ' +
        "but each lane's turn locks its own row, passes the other lanes' events and commits its own cursor; " +
        "the statement tables under the catch-up scenario show each one's statements, with their mean time and rows per call.",
      '',
    );
  }

  if (missed.has('slow-handler')) {
    const f = (concurrency: number, system: string, figure: string) =>
      med('slow-handler', slowHandlerCase(concurrency), system, figure);
    const concurrencies = [
      ...new Set(
        results
          .find((r) => r.scenario === 'slow-handler')
          ?.rows.map((row) => Number.parseInt(row.case, 10))
          .filter((c) => Number.isFinite(c)) ?? [],
      ),
    ];
    const lanesBound = (concurrency: number) =>
      summarize(
        pairwise(
          find('slow-handler', slowHandlerCase(concurrency), S.sluice(concurrency), 'of the ceiling'),
          find(
            'slow-handler',
            slowHandlerCase(concurrency),
            S.sluice(concurrency),
            'busiest lane ÷ mean lane',
          ),
          (ofCeiling, busiest) => ofCeiling * busiest,
        ) ?? [],
      ).median;
    const perCase = concurrencies.map((c) => {
      const sluice = S.sluice(c);
      const hasGraphile = find('slow-handler', slowHandlerCase(c), S.graphile, 'throughput').length > 0;
      return (
        `${c} at once: Sluice ${n(f(c, sluice, 'throughput'))} events/s, ${n(f(c, sluice, 'of the ceiling'))} % of the ceiling (calls of ${n(f(c, sluice, 'handler call'))} ms)` +
        (c > 1
          ? `, its busiest lane ${n(f(c, sluice, 'busiest lane ÷ mean lane'))}× the mean, ${n(lanesBound(c))} % of what lanes that unequal allow`
          : '') +
        (hasGraphile
          ? `; graphile-worker ${n(f(c, S.graphile, 'throughput'))} events/s, ${n(f(c, S.graphile, 'of the ceiling'))} % of the ceiling (calls of ${n(f(c, S.graphile, 'handler call'))} ms), ` +
            `Sluice ${x(pairMedian('slow-handler', slowHandlerCase(c), sluice, S.graphile, 'throughput', ratio))} its rate run by run`
          : '')
      );
    });
    const sum = (system: string, figure: string) =>
      concurrencies.reduce(
        (total, c) =>
          total + find('slow-handler', slowHandlerCase(c), system, figure).reduce((a, b) => a + b, 0),
        0,
      );
    const sluiceSystems = concurrencies.map((c) => S.sluice(c));
    const top = Math.max(...concurrencies);
    out.push(
      '### Slow handler',
      '',
      ...perCase.map((line) => `- ${line}.`),
      "- The ceiling is concurrency × 1000 ÷ the handler's timer (ms); a call that took longer than its timer fired late, its event loop busy with other work. Lanes share the events by the hash of their stream id, not evenly, and each lane delivers its own one at a time: " +
        'the lanes finish when the busiest does, so busiest ÷ mean × "of the ceiling" is how close they came to what that split allows. graphile-worker hands any job to any free slot.',
      `- Start-up: the first handler call came ${n(f(top, S.sluice(top), 'first handler call after start'))} ms after Sluice's start() with ${top} lanes ` +
        `and ${n(f(top, S.graphile, 'first handler call after start'))} ms after graphile-worker's run() was called, both counted in events/s ` +
        `(the drain took ${n((1000 * f(top, S.sluice(top), 'backlog')) / f(top, S.sluice(top), 'throughput'))} ms for Sluice).`,
      `- CPU with ${top} at once: Sluice ${n(f(top, S.sluice(top), 'PostgreSQL CPU per event'))} µs of PostgreSQL and ${n(f(top, S.sluice(top), 'Node CPU per event'))} µs of Node CPU per event ` +
        `(${n(f(top, S.sluice(top), 'write transactions per 100 events'))} write transactions per 100 events), graphile-worker ${n(f(top, S.graphile, 'PostgreSQL CPU per event'))} µs and ` +
        `${n(f(top, S.graphile, 'Node CPU per event'))} µs (${n(f(top, S.graphile, 'write transactions per 100 events'))}); ` +
        `PostgreSQL was busy ${n(f(top, S.sluice(top), 'PostgreSQL CPU'))} % and ${n(f(top, S.graphile, 'PostgreSQL CPU'))} % of a core, Node ${n(f(top, S.sluice(top), 'Node CPU'))} % and ${n(f(top, S.graphile, 'Node CPU'))} %, ` +
        `of the ${100 * availableParallelism()} % that ${availableParallelism()} cores offer.`,
      `- Order per stream, summed over the runs (inversions at start / at finish / overlaps): Sluice ${n(sluiceSystems.reduce((a, sys) => a + sum(sys, 'per-stream inversions'), 0))} / ` +
        `${n(sluiceSystems.reduce((a, sys) => a + sum(sys, 'per-stream inversions at finish'), 0))} / ${n(sluiceSystems.reduce((a, sys) => a + sum(sys, 'per-stream overlaps'), 0))}; ` +
        `graphile-worker ${n(sum(S.graphile, 'per-stream inversions'))} / ${n(sum(S.graphile, 'per-stream inversions at finish'))} / ${n(sum(S.graphile, 'per-stream overlaps'))}.`,
      '',
    );
  }

  if (missed.has('append')) {
    const f = (perTx: string, system: string, figure: string) =>
      med('append', `8 writers, ${perTx}`, system, figure);
    const side = (perTx: string) => {
      const node =
        f(perTx, APPEND_SYSTEMS.none, 'Node CPU per transaction') -
        f(perTx, APPEND_SYSTEMS.bare, 'Node CPU per transaction');
      const pg =
        f(perTx, APPEND_SYSTEMS.none, 'PostgreSQL CPU per transaction') -
        f(perTx, APPEND_SYSTEMS.bare, 'PostgreSQL CPU per transaction');
      return `${perTx}: append() (wakeUp none) used ${moreOrLess(node)} Node CPU and ${moreOrLess(pg)} PostgreSQL CPU per transaction than the bare insert`;
    };
    const cost = (system: string) =>
      pairMedian(
        'append',
        '8 writers, 1 event/tx',
        system,
        APPEND_SYSTEMS.none,
        'events/s',
        (a, b) => 100 * (1 - a / b),
      );
    out.push(
      '### Append',
      '',
      `- ${side('1 event/tx')}; ${side('10 events/tx')}.`,
      `- The writers are CPU-bound: with 1 event/tx the bare insert kept PostgreSQL at ${n(f('1 event/tx', APPEND_SYSTEMS.bare, 'PostgreSQL CPU'))} % and Node at ` +
        `${n(f('1 event/tx', APPEND_SYSTEMS.bare, 'Node CPU'))} % of a core on the ${availableParallelism()} cores they share, so each µs per transaction shows in the rate ` +
        "(min–max in the table for the spread between runs; the systems take turns within each run, so a run's ratios compare like with like).",
      '- What append() does beyond the bare insert: it validates each event (JSON.stringify, a byte count, a U+0000 check), sends metadata, and returns each event with its id and created_at ' +
        "(RETURNING id, created_at), with one bound parameter per field instead of the bare insert's arrays.",
      `- In these runs, with 10 events/tx: append() (wakeUp none) allocated ${n(f('10 events/tx', APPEND_SYSTEMS.none, 'allocated per transaction'))} KiB per transaction and the bare insert ` +
        `${n(f('10 events/tx', APPEND_SYSTEMS.bare, 'allocated per transaction'))} KiB (it builds its unnest() arrays as text), but scavenges found ${n(f('10 events/tx', APPEND_SYSTEMS.none, 'found alive by scavenges'))} % ` +
        `of the young generation alive during append()'s slices against ${n(f('10 events/tx', APPEND_SYSTEMS.bare, 'found alive by scavenges'))} % during the bare insert's.`,
      `- The wake-up itself, 8 single-event writers: after-commit NOTIFY ${n(cost(APPEND_SYSTEMS.auto))} %, in-transaction NOTIFY ${n(cost(APPEND_SYSTEMS.inTx))} % ` +
        `of append()'s throughput (commit p99 ${n(f('1 event/tx', APPEND_SYSTEMS.inTx, 'commit p99'))} ms in-transaction, ${n(f('1 event/tx', APPEND_SYSTEMS.auto, 'commit p99'))} ms after commit, ` +
        `${n(f('1 event/tx', APPEND_SYSTEMS.none, 'commit p99'))} ms without). transaction() sends its NOTIFY at once unless 3 commits came in the 10 ms before, else at most one per 10 ms: ` +
        `the LISTEN session heard ${n(f('1 event/tx', APPEND_SYSTEMS.auto, 'NOTIFYs heard/s'))} a second, ` +
        'each its own short write transaction (PostgreSQL gives a notifying transaction an xid).',
      '',
    );
  }

  if (missed.has('latency')) {
    const f = (system: string, figure: string) => med('latency', undefined, system, figure);
    const c50 = (system: string) => n(f(system, 'commit→handler p50'));
    const c99 = (system: string) => n(f(system, 'commit→handler p99'));
    const diff = (a: string, b: string, figure: string) => {
      const ms = pairMedian('latency', undefined, a, b, figure, (p, q) => p - q);
      return ms < 0 ? `${n(-ms)} ms less` : `${n(ms)} ms more`;
    };
    const share = (system: string) => n((100 * f(system, 'append→commit p50')) / f(system, 'p50'));
    out.push(
      '### Latency',
      '',
      `- commit→handler p50 / p99: Sluice with the dispatcher in another process ${c50(L.otherProcess)} / ${c99(L.otherProcess)} ms, ` +
        `from another pool of the same process ${c50(L.otherPool)} / ${c99(L.otherPool)} ms, in-process wake-up ${c50(L.inProcess)} / ${c99(L.inProcess)} ms, ` +
        `minimal loop ${c50(L.minimal)} / ${c99(L.minimal)} ms, graphile-worker ${c50(L.graphile)} / ${c99(L.graphile)} ms (from the COMMIT of its adding transaction).`,
      '- After the commit, Sluice woken from another pool or process waits for the NOTIFY transaction() sends once COMMIT is answered (a statement, then its delivery to the LISTEN connection), ' +
        'then runs a pass and the turn: BEGIN, the lock with the fetch behind it; the pre-check and the turn-start record only on the paths the step table under the latency scenario shows taking them. ' +
        "graphile-worker and the minimal loop hear of the commit from PostgreSQL itself (their NOTIFY is part of the producer's transaction). " +
        `The in-process wake-up skips the NOTIFY: its commit→handler p50 took ${diff(L.inProcess, L.otherPool, 'commit→handler p50')} than from another pool of the same process (run by run, median); ` +
        `the dispatcher in a process of its own ${diff(L.otherProcess, L.otherPool, 'commit→handler p50')} than in the appender's process. ` +
        `Woken by a NOTIFY inside the appending transaction instead (wakeUp 'in-transaction', as graphile-worker's), the dispatcher in a process of its own took ${c50(L.otherProcessInTx)} / ${c99(L.otherProcessInTx)} ms at p50 / p99, ` +
        `its p50 ${diff(L.otherProcessInTx, L.otherProcess, 'commit→handler p50')} than with the after-commit NOTIFY (run by run, median); the append scenario shows what that NOTIFY costs the writers.`,
      `- The append's own share: append→commit p50 ${n(f(L.otherProcess, 'append→commit p50'))} ms of Sluice's append call→handler p50 ${n(f(L.otherProcess, 'p50'))} ms ` +
        `(dispatcher in another process, ${share(L.otherProcess)} %), ${n(f(L.graphile, 'append→commit p50'))} ms of graphile-worker's ${n(f(L.graphile, 'p50'))} ms (${share(L.graphile)} %, BEGIN, add_job and COMMIT). ` +
        'No dispatcher shortens the transaction that appends; the commit→handler goals leave it out.',
      `- The tails: Node paused for garbage collection ${n(f(L.otherProcess, 'GC pause'))} ms a second (longest ${n(f(L.otherProcess, 'longest GC pause'))} ms) in Sluice's runs with the dispatcher in another process (both processes), ` +
        `${n(f(L.otherPool, 'GC pause'))} ms a second (longest ${n(f(L.otherPool, 'longest GC pause'))} ms) from another pool of the same process, ` +
        `${n(f(L.minimal, 'GC pause'))} ms a second (longest ${n(f(L.minimal, 'longest GC pause'))} ms) in the minimal loop's and ${n(f(L.graphile, 'GC pause'))} ms a second (longest ${n(f(L.graphile, 'longest GC pause'))} ms) in graphile-worker's ` +
        '(appender and consumer share the process). A pause holds up every event in flight in its process. How often a process scavenges follows what it allocates: ' +
        `${n(f(L.otherProcess, 'allocated per event'))} KiB per event in Sluice's runs with the dispatcher in another process (${n(f(L.otherProcess, "of which the dispatcher's process"))} KiB of it in the dispatcher's process), ` +
        `${n(f(L.otherPool, 'allocated per event'))} KiB from another pool of the same process, ${n(f(L.minimal, 'allocated per event'))} KiB in the minimal loop's ` +
        `and ${n(f(L.graphile, 'allocated per event'))} KiB in graphile-worker's. How long a scavenge pauses follows the share of the young generation it finds alive: ` +
        `${n(f(L.otherProcess, 'found alive by scavenges'))} %, ${n(f(L.otherPool, 'found alive by scavenges'))} %, ${n(f(L.minimal, 'found alive by scavenges'))} % and ${n(f(L.graphile, 'found alive by scavenges'))} % in the same runs.`,
      `- Polling only: commit→handler p99 ${n(f(L.polling, 'commit→handler p99'))} ms, append→handler p99 ${n(f(L.polling, 'p99'))} ms and max ${n(f(L.polling, 'max'))} ms, with a ${DEFAULTS.pollIntervalMs} ms poll interval.`,
      '',
    );
  }

  if (missed.has('idle')) {
    const f = (figure: string) => med('idle', undefined, IDLE_SYSTEMS.sluice, figure);
    const m = (figure: string) => med('idle', undefined, IDLE_SYSTEMS.minimal, figure);
    const fl = (figure: string) => med('idle', undefined, IDLE_SYSTEMS.floor, figure);
    const sluiceCpu = find('idle', undefined, IDLE_SYSTEMS.sluice, 'Node CPU');
    const sluiceGc = find('idle', undefined, IDLE_SYSTEMS.sluice, 'GC pause in the window');
    const floorCpu = find('idle', undefined, IDLE_SYSTEMS.floor, 'Node CPU');
    const floorGc = find('idle', undefined, IDLE_SYSTEMS.floor, 'GC pause in the window');
    out.push(
      '### Idle',
      '',
      `- Sluice: ${n(f('statements per poll tick'))} statement(s) per tick, ${n(f('write transactions'))} write transactions, PostgreSQL ${n(f('PostgreSQL CPU'))} % and Node ` +
        `${n(f('Node CPU'))} % of a core, Node ${n(pairMedian('idle', undefined, IDLE_SYSTEMS.sluice, IDLE_SYSTEMS.floor, 'Node CPU', (a, b) => a - b))} % above the floor, run by run ` +
        `(the minimal loop polling every consumer: ${n(m('statements per poll tick'))} statements per tick, PostgreSQL ${n(m('PostgreSQL CPU'))} %, Node ${n(m('Node CPU'))} %).`,
      `- The floor: \`select 1\` once per tick from the same kind of pool, with no consumer at all, cost PostgreSQL ${n(fl('PostgreSQL CPU'))} % and Node ${n(fl('Node CPU'))} % of a core in the same run. ` +
        `That is the price of one statement every ${DEFAULTS.pollIntervalMs} ms on this machine (a timer, a round trip, a backend woken up), before the statement does anything.`,
      `- Node CPU run by run (runs 1 to ${sluiceCpu.length}): Sluice ${list(sluiceCpu)} %; the floor ${list(floorCpu)} %; ` +
        `GC pauses inside Sluice's window ${list(sluiceGc)} ms and inside the floor's ${list(floorGc)} ms. process.cpuUsage() counts the threads that mark and sweep for the collector as well as the main thread.`,
      '- While nothing commits anywhere in the cluster, a Sluice tick sends only `select pg_current_snapshot()::text`: an unchanged snapshot means no transaction has ended since the last full pre-check, which then stands (the statement table under the idle scenario shows it). ' +
        'It is sent on the LISTEN connection: one backend answers every tick. ' +
        `The held gap does not change the snapshot, so the ${Math.round(f('consumers with a pending gap'))} consumers waiting on it cost no statement more. What Node does above the floor is the pass around that statement.`,
      '- A full pre-check (after any commit, or while a consumer is dead, disabled, retrying or behind) decides the trivially caught-up consumers in SQL and returns one row (their names, and the others as JSON).',
      '',
    );
  }

  if (missed.has('rebuild')) {
    const f = (system: string, figure: string) => med('rebuild', undefined, system, figure);
    const three = (figure: string, unit: string) =>
      `${n(f(R.alone, figure))}${unit} without a rebuild, ${n(f(R.duringSeparate, figure))}${unit} while version 2 rebuilt in a process of its own ` +
      `and ${n(f(R.during, figure))}${unit} while it rebuilt in the serving process`;
    const p99Ratios = (system: string) =>
      (
        pairwise(
          find('rebuild', undefined, system, 'commit→handler p99'),
          find('rebuild', undefined, R.alone, 'commit→handler p99'),
          ratio,
        ) ?? []
      )
        .map(x)
        .join(', ');
    const rebuilt = (system: string, where: string) =>
      `${where} version 2 rebuilt ${n(f(system, 'events rebuilt'))} events at ${n(f(system, 'rebuild rate'))} events/s in ${n(f(system, 'rebuild took'))} s, ` +
      `Node using ${n(f(system, 'Node CPU, dispatcher process'))} % of a core in the process that rebuilt it and PostgreSQL ${n(f(system, 'PostgreSQL CPU'))} % over the same window, ` +
      `with ${n(f(system, 'WAL per rebuilt event'))} bytes of WAL per rebuilt event`;
    out.push(
      '### Rebuild',
      '',
      `- The serving version's commit→handler p99 was ${three('commit→handler p99', ' ms')} ` +
        `(÷ without a rebuild, run by run: ${p99Ratios(R.duringSeparate)} in a process of its own; ${p99Ratios(R.during)} in the serving process); ` +
        `p50 ${three('commit→handler p50', ' ms')}; the slowest event ${three('commit→handler max', ' ms')}.`,
      `- The server: PostgreSQL used ${three('PostgreSQL CPU', ' % of a core')}, of the ${100 * availableParallelism()} % that ${availableParallelism()} cores offer ` +
        `(shared with the dispatcher processes and the appender's). The appends' own transactions took append→commit p99 ${three('append→commit p99', ' ms')}: ` +
        "a server busy with the rebuild's writes makes every commit wait longer, the serving version's turns as well as the appends.",
      `- The serving process: Node used ${three('Node CPU, dispatcher process', ' % of a core')}; GC paused it ${three('GC pause, dispatcher process', ' ms a second')}, ` +
        `the longest pause ${three('longest GC pause, dispatcher process', ' ms')}. In a process of its own, version 2's turns, pool and heap are that process's; ` +
        `in the serving process both versions' turns share its event loop, its pool and its ${DEFAULTS.concurrency} turn slots: ` +
        "while a pause or a stretch of version 2's batch (its handler calls, the rows it parses) holds the event loop, version 1's wake-up and turn wait.",
      `- ${rebuilt(R.rebuildSeparate, 'In a process of its own,')}; ${rebuilt(R.rebuild, 'in the serving process,')} ` +
        "(the WAL: everything the cluster wrote over the window, the appends and version 1's rows included).",
      '',
    );
  }

  if (missed.has('scale')) {
    const f = (figure: string) => med('scale', undefined, 'Sluice', figure);
    out.push(
      '### Scale',
      '',
      `- Peak RSS ${n(f('peak RSS'))} MiB (at start ${n(f('RSS at start'))} MiB), last quarter ÷ first quarter ${n(f('last quarter / first quarter'))}×, ` +
        `slowest second ${n(f('slowest second'))} events/s against ${n(f('events/s'))} on average.`,
      '',
    );
  }
  return out;
}

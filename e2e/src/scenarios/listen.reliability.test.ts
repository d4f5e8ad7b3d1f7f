// docs/reliability.md#c6: losing LISTEN. (a) Only the dispatcher's LISTEN backend is terminated
// (repeatedly): deliveries go on by polling within poll interval + turn time, LISTEN reconnects,
// a reconnect resyncs (a catch-up pass), and exactly one LISTEN backend exists afterwards.
// (b) The LISTEN connection is blackholed (half-open: a proxy stops forwarding its bytes in both
// directions without closing it): deliveries must keep flowing by polling; whether Sluice notices
// and re-LISTENs is measured and reported as it is.
import { setTimeout as sleep } from 'node:timers/promises';
import {
  append,
  createDispatcher,
  METRIC,
  silentLogger,
  transaction,
  type Dispatcher,
  type EventRecord,
  type Sql,
} from '@sluice/core';
import {
  capturingLogger,
  freshSchema,
  listenBackends,
  recordingConsumer,
  type RecordingConsumer,
  until,
} from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import { afterAll, expect, test } from 'vitest';
import { profile } from '../report/results.js';
import { check, metricsProbe, quantile, round, ScenarioRecorder } from './support.js';
import { BlackholeProxy } from './tcp-proxy.js';

const db = await useTestDatabase();
const recorder = new ScenarioRecorder('scenarios-listen');
const SOAK = profile() === 'soak';
// A slow poll keeps NOTIFY wake-ups (tens of ms) and poll wake-ups (up to POLL_MS) apart on a loaded box.
const POLL_MS = 2_000;
const MAX_TURN_MS = 1_000;
/** I9 with LISTEN broken: a committed event is delivered within one poll interval plus one turn. */
const LATENCY_BOUND_MS = POLL_MS + MAX_TURN_MS;
/** C6b: the LISTEN check interval; a dead socket is found within two of them. */
const LISTEN_CHECK_MS = 1_000;

afterAll(async () => {
  await recorder.write(db.sql);
});

/** A consumer that records, per event id, how long after its commit the handler got it. */
function timedConsumer(name: string) {
  const committedAt = new Map<bigint, number>();
  const latency = new Map<bigint, number>();
  const c: RecordingConsumer = recordingConsumer(name, {
    handler: (event: EventRecord) => {
      c.seen.push(event);
      const at = committedAt.get(event.id);
      if (at !== undefined && !latency.has(event.id)) latency.set(event.id, performance.now() - at);
    },
  });
  return { c, committedAt, latency };
}

/** Appends one event from "another process" (its own pool): only NOTIFY or polling can wake the dispatcher. */
async function appendElsewhere(
  writer: Sql,
  schema: string,
  committedAt: Map<bigint, number>,
): Promise<bigint> {
  const [event] = await transaction(writer, (tx) =>
    append(tx, [{ streamId: 'c6', type: 'C6', data: {} }], { schema }),
  );
  committedAt.set(event!.id, performance.now());
  return event!.id;
}

/** Ten events appended elsewhere 40–100 ms apart (a NOTIFY each), once all are delivered. */
async function pacedRound(
  writer: Sql,
  schema: string,
  committedAt: Map<bigint, number>,
  latency: ReadonlyMap<bigint, number>,
  what: string,
): Promise<bigint[]> {
  const ids: bigint[] = [];
  for (let i = 0; i < 10; i++) {
    ids.push(await appendElsewhere(writer, schema, committedAt));
    await sleep(40 + ((i * 37) % 60));
  }
  await until(() => ids.every((id) => latency.has(id)), 10_000, what);
  return ids;
}

/** Samples dispatcher.listenConnected every ms; keeps the disconnected intervals. */
function connectionWatch(dispatcher: Dispatcher) {
  const run = { stopped: false };
  const down: { from: number; to: number | undefined }[] = [];
  const loop = (async () => {
    while (!run.stopped) {
      const open = down[down.length - 1];
      if (!dispatcher.listenConnected && (open === undefined || open.to !== undefined)) {
        down.push({ from: performance.now(), to: undefined });
      } else if (dispatcher.listenConnected && open !== undefined && open.to === undefined) {
        open.to = performance.now();
      }
      await sleep(1);
    }
  })();
  return {
    down,
    isDownAt: (t: number) => down.some((d) => t >= d.from && (d.to === undefined || t <= d.to)),
    async stop() {
      run.stopped = true;
      await loop;
    },
  };
}

const median = (values: readonly number[]) => quantile(values, 0.5);

test('C6a: LISTEN backend terminated: polling delivers, LISTEN reconnects and resyncs, one listener after', async () => {
  await recorder.run('C6a', 'LISTEN loss: listen backend terminated', ['I9'], async (figures) => {
    const kills = SOAK ? 20 : 5;
    const schema = await freshSchema(db.sql, 'c6a');
    const { c, committedAt, latency } = timedConsumer('c6a-consumer');
    const pool = db.connect({ max: 6 });
    const writer = db.connect({ max: 2 });
    const dispatcher = createDispatcher({
      sql: pool,
      schema,
      consumers: [c.consumer],
      logger: silentLogger,
      pollIntervalMs: POLL_MS,
      maxTurnMs: MAX_TURN_MS,
    });
    await dispatcher.start();
    const watch = connectionWatch(dispatcher);
    try {
      await until(() => dispatcher.listenConnected, 5_000, 'LISTEN');
      // Baseline: NOTIFY wakes the dispatcher well within the poll interval.
      const baseline = await pacedRound(writer, schema, committedAt, latency, 'baseline deliveries');

      // Terminate only the LISTEN backend, several times, with appends every 50 ms throughout.
      const relisten: number[] = [];
      const pids = new Set<number>();
      const during: bigint[] = [];
      for (let k = 0; k < kills; k++) {
        const [pid] = await listenBackends(db.sql);
        expect(pid).toBeDefined();
        pids.add(pid!);
        const killedAt = performance.now();
        await db.sql`select pg_terminate_backend(${pid!})`;
        const phaseEnd = killedAt + 1_200;
        while (performance.now() < phaseEnd) {
          const id = await appendElsewhere(writer, schema, committedAt);
          if (watch.isDownAt(committedAt.get(id)!)) during.push(id);
          await sleep(50);
        }
        await until(() => dispatcher.listenConnected, 10_000, 'LISTEN to reconnect');
        const outage = watch.down.find((d) => d.from >= killedAt);
        relisten.push(outage?.to === undefined ? Number.NaN : outage.to - killedAt);
      }
      const phase = [...committedAt.keys()];
      await until(() => phase.every((id) => latency.has(id)), 10_000, 'every event');
      const after = await listenBackends(db.sql);

      // Resync: with a 60 s poll, an event committed (without any NOTIFY) while LISTEN is down is
      // delivered by the catch-up pass of the reconnect, not by the poll.
      const resync = await resyncProbe(await freshSchema(db.sql, 'c6r'));

      const lat = (ids: readonly bigint[]) => ids.map((id) => latency.get(id)!);
      const post = await pacedRound(writer, schema, committedAt, latency, 'deliveries after recovery');

      figures['poll interval / maxTurnMs (ms)'] = `${POLL_MS} / ${MAX_TURN_MS}`;
      figures['listen backends terminated'] = kills;
      figures['re-LISTEN time p50/max (ms)'] = `${round(median(relisten))}/${round(Math.max(...relisten))}`;
      figures['events committed while LISTEN was down'] = during.length;
      figures['latency while down max (ms)'] = during.length > 0 ? round(Math.max(...lat(during))) : 'n/a';
      figures['latency over the whole phase max (ms)'] = round(Math.max(...lat(phase)));
      figures['NOTIFY latency before / after p50 (ms)'] =
        `${round(median(lat(baseline)))} / ${round(median(lat(post)))}`;
      figures['listen backends after'] = after.length;
      figures['resync on reconnect: delivered after (ms), poll 60 s'] = round(resync);
      const all = [...committedAt.keys()];
      figures['lost'] = all.filter((id) => !c.ids().includes(id)).length;
      figures['duplicated'] = c.ids().length - new Set(c.ids()).size;

      expect(relisten.every((ms) => Number.isFinite(ms))).toBe(true);
      expect(Math.max(...lat(phase))).toBeLessThanOrEqual(LATENCY_BOUND_MS);
      expect(after).toHaveLength(1);
      expect(pids.has(after[0]!)).toBe(false);
      expect(median(lat(post))).toBeLessThan(POLL_MS / 2); // NOTIFY wakes it again
      expect(resync).toBeLessThan(5_000);
      expect(c.ids()).toEqual(all);
    } finally {
      await watch.stop();
      await dispatcher.stop();
      await writer.end();
    }
  });
});

/** ms from commit to delivery of an event committed without NOTIFY while LISTEN was down (60 s poll). */
async function resyncProbe(schema: string): Promise<number> {
  const { c, committedAt, latency } = timedConsumer('c6a-resync');
  const dispatcher = createDispatcher({
    sql: db.connect({ max: 6 }),
    schema,
    consumers: [c.consumer],
    logger: silentLogger,
    pollIntervalMs: 60_000,
    maxTurnMs: MAX_TURN_MS,
  });
  await dispatcher.start();
  try {
    await until(() => dispatcher.listenConnected, 5_000, 'LISTEN');
    await until(async () => (await dispatcher.runOnce()).processed === 0, 30_000, 'catching up first');
    for (let attempt = 0; attempt < 10; attempt++) {
      const before = await listenBackends(db.sql);
      for (const pid of before) await db.sql`select pg_terminate_backend(${pid})`;
      await until(() => !dispatcher.listenConnected, 5_000, 'the LISTEN close to be seen');
      const [event] = await db.sql.begin((tx) =>
        append(tx, [{ streamId: 'c6', type: 'Resync', data: {} }], { schema, wakeUp: 'none' }),
      );
      committedAt.set(event!.id, performance.now());
      if (dispatcher.listenConnected) continue; // reconnected before the commit: try again
      await until(() => latency.has(event!.id), 10_000, 'the reconnect catch-up pass');
      return latency.get(event!.id)!;
    }
    throw new Error('could not commit while LISTEN was down');
  } finally {
    await dispatcher.stop();
  }
}

test('C6b: blackholed (half-open) LISTEN socket: deliveries keep flowing by polling; the LISTEN check finds it and reconnects', async () => {
  await recorder.run('C6b', 'LISTEN loss: blackholed listen socket (half-open)', ['I9'], async (figures) => {
    const outageMs = SOAK ? 90_000 : 8_000;
    const target = new URL(db.url);
    const proxy = await BlackholeProxy.start(target.hostname, Number(target.port));
    const proxied = new URL(db.url);
    proxied.port = String(proxy.port);
    const schema = await freshSchema(db.sql, 'c6b');
    const { c, committedAt, latency } = timedConsumer('c6b-consumer');
    const probe = metricsProbe();
    const logger = capturingLogger();
    const pool = db.connect({ max: 6, host: '127.0.0.1', port: proxy.port });
    const writer = db.connect({ max: 2 }); // direct, not through the proxy
    const dispatcher = createDispatcher({
      sql: pool,
      schema,
      consumers: [c.consumer],
      logger,
      pollIntervalMs: POLL_MS,
      maxTurnMs: MAX_TURN_MS,
      meterProvider: probe.meterProvider,
      listenCheckMs: LISTEN_CHECK_MS,
    });
    await dispatcher.start();
    const watch = connectionWatch(dispatcher);
    const isListen = (name: string | undefined) => name?.startsWith('sluice-listen') === true;
    try {
      await until(() => dispatcher.listenConnected, 5_000, 'LISTEN');
      const listeners = proxy.connections().filter((p) => isListen(p.applicationName));
      figures['connections through the proxy (listen)'] =
        `${proxy.connections().length} (${listeners.length})`;
      expect(listeners).toHaveLength(1);

      const baseline = await pacedRound(writer, schema, committedAt, latency, 'baseline deliveries');

      // Blackhole the LISTEN connection: no bytes either way, no FIN, no RST.
      expect(proxy.blackhole((p) => isListen(p.applicationName))).toBe(1);
      const holeAt = performance.now();
      const during: bigint[] = [];
      let gaugeZeroSeen = false;
      while (performance.now() - holeAt < outageMs) {
        during.push(await appendElsewhere(writer, schema, committedAt));
        if ((await probe.value(METRIC.listenConnected)) === 0) gaugeZeroSeen = true;
        await sleep(100);
      }
      await until(() => during.every((id) => latency.has(id)), 10_000, 'deliveries during the blackhole');
      const detectedDown = watch.down.find((d) => d.from >= holeAt);
      const newListener = proxy
        .connections()
        .some((p) => isListen(p.applicationName) && !p.held && p.openedAt > holeAt);
      const held = proxy.connections().find((p) => p.held);
      const lat = (ids: readonly bigint[]) => ids.map((id) => latency.get(id)!);

      figures['blackhole duration (s)'] = round(outageMs / 1000, 1);
      figures['events during the blackhole'] = during.length;
      figures['delivery latency during the blackhole p50/max (ms)'] =
        `${round(median(lat(during)))}/${round(Math.max(...lat(during)))}`;
      figures['NOTIFY latency before p50 (ms)'] = round(median(lat(baseline)));
      figures['notification bytes swallowed by the blackhole'] = held?.heldDown ?? 0;
      figures['blackhole detected (listenConnected false / gauge 0)'] =
        `${detectedDown === undefined ? 'no' : `yes after ${round(detectedDown.from - holeAt)} ms`} / ${gaugeZeroSeen ? 'yes' : 'no'}`;
      figures['re-LISTEN during the blackhole'] = newListener ? 'yes' : 'no';

      figures['listenCheckMs'] = LISTEN_CHECK_MS;
      // The blackholed flow is still open at the proxy: reset it, so its backend goes away.
      proxy.reset((p) => p.held);
      const post = await pacedRound(writer, schema, committedAt, latency, 'deliveries after the blackhole');
      figures['NOTIFY latency after the blackhole p50 (ms)'] = round(median(lat(post)));
      figures['LISTEN warnings logged during the blackhole'] = logger.lines.filter(
        (l) => l.level !== 'debug' && l.at > holeAt && /LISTEN/i.test(l.message),
      ).length;
      const all = [...committedAt.keys()];
      figures['lost'] = all.filter((id) => !c.ids().includes(id)).length;

      // I9: NOTIFY loss degrades to polling, and the dead socket is found and replaced.
      expect(Math.max(...lat(during))).toBeLessThanOrEqual(LATENCY_BOUND_MS);
      check(
        detectedDown !== undefined && detectedDown.from - holeAt <= 2 * LISTEN_CHECK_MS + 1_000,
        'the blackholed LISTEN socket was not detected within two checks',
      );
      check(gaugeZeroSeen, 'sluice.listen.connected never dropped to 0 during the blackhole');
      check(newListener, 'no new LISTEN connection during the blackhole');
      expect(c.ids()).toEqual(all);
      expect(median(lat(post))).toBeLessThan(POLL_MS / 2);
      // The reset backend goes away with its socket: one listener again.
      await until(
        async () => (await listenBackends(db.sql)).length === 1,
        10_000,
        'exactly one LISTEN backend',
      );
    } finally {
      await watch.stop();
      await dispatcher.stop();
      await writer.end();
      await proxy.close();
    }
  });
});

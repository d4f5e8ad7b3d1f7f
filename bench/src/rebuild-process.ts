// The rebuild scenario's dispatcher in a process of its own (harness/rebuild-dispatcher.ts starts
// it): versions of the stats projection at default options ([1], [1, 2] or [2]), woken by the
// NOTIFY the appender's transaction() sends after its commit in the scenario's process. Only Sluice
// and postgres.js are loaded here.
import { monotonicMs, runChild, sendToParent } from './harness/child-channel.js';
import { nodeCpuMs } from './harness/counters.js';
import { GcPauses } from './harness/gc.js';
import type {
  FromRebuildProcess,
  RebuildProcessInput,
  ToRebuildProcess,
} from './harness/rebuild-dispatcher.js';
import { DeliveryTracker } from './harness/tracker.js';
import { benchDispatcher, pool, statsProjection } from './systems/sluice.js';

const send = (message: FromRebuildProcess) => sendToParent(message);

async function main(input: RebuildProcessInput): Promise<void> {
  const { seqFrom, capacity } = input;
  // Version 1 (when declared) is caught up on every event below seqFrom: one of them delivered
  // again counts as a duplicate (out of its tracker's range). Version 2 (when declared) is to have
  // every event of the log.
  const v1 = input.versions.includes(1)
    ? { tracker: new DeliveryTracker(1, capacity), handledAt: new Float64Array(capacity) }
    : undefined;
  const v2 = input.versions.some((version) => version !== 1)
    ? { tracker: new DeliveryTracker(1, seqFrom + capacity), firstAt: 0, lastAt: 0 }
    : undefined;
  const consumers = input.versions.map((version) =>
    statsProjection(version, (seq) => {
      if (version === 1 && v1) {
        const i = seq - seqFrom;
        if (i >= 0 && i < capacity && v1.handledAt[i] === 0) v1.handledAt[i] = monotonicMs();
        v1.tracker.record(0, i);
      } else if (v2) {
        const at = monotonicMs();
        if (v2.firstAt === 0) v2.firstAt = at;
        v2.lastAt = at;
        v2.tracker.record(0, seq);
      }
    }),
  );
  const sql = pool(input.url, input.poolSize);
  const dispatcher = benchDispatcher(sql, consumers);
  let gc: GcPauses | undefined;
  let window = { wallStart: 0, cpuStart: 0 };
  let finishing: ((finish: { appended: number; timeoutMs: number }) => void) | undefined;
  const finished = new Promise<{ appended: number; timeoutMs: number }>((resolve) => {
    finishing = resolve;
  });
  process.on('message', (message: ToRebuildProcess) => {
    if ('measure' in message) {
      gc = new GcPauses();
      gc.from = performance.now();
      window = { wallStart: performance.now(), cpuStart: nodeCpuMs() };
    } else if ('endMeasure' in message) {
      const wallMs = performance.now() - window.wallStart;
      const cpuMs = nodeCpuMs() - window.cpuStart;
      if (gc) {
        gc.to = performance.now();
        gc.stop();
      }
      void send({
        window: { wallMs, cpuMs, gcPauseMs: gc?.totalMs ?? 0, longestGcPauseMs: gc?.longest ?? 0 },
      });
    } else if ('v1Through' in message) {
      const { appended, timeoutMs } = message.v1Through;
      void (v1?.tracker.whenDistinct(appended - seqFrom, timeoutMs) ?? Promise.resolve(false)).then(
        (caughtUp) => send({ caughtUp }),
      );
    } else {
      finishing?.(message.finish);
    }
  });
  try {
    const startCalledAt = monotonicMs();
    await dispatcher.start();
    await send({ ready: { startCalledAt } });
    const { appended, timeoutMs } = await finished;
    const deadline = performance.now() + timeoutMs;
    const left = () => Math.max(1, deadline - performance.now());
    await v1?.tracker.whenDistinct(appended - seqFrom, left());
    await v2?.tracker.whenDistinct(appended, left());
    await dispatcher.stop();
    await send({
      result: {
        ...(v1
          ? {
              v1: {
                lost: v1.tracker.lost(appended - seqFrom),
                duplicated: v1.tracker.duplicated(),
                handledAt: Array.from(v1.handledAt),
              },
            }
          : {}),
        ...(v2
          ? {
              v2: {
                lost: v2.tracker.lost(appended),
                duplicated: v2.tracker.duplicated(),
                firstAt: v2.firstAt,
                lastAt: v2.lastAt,
              },
            }
          : {}),
      },
    });
  } finally {
    await sql.end();
  }
}

runChild('SLUICE_BENCH_REBUILD', 'rebuild dispatcher process', (input) => main(input as RebuildProcessInput));

// The rebuild scenario's dispatcher in a process of its own (harness/rebuild-dispatcher.ts starts
// it): versions of the stats projection at default options, woken by the NOTIFY the appender's
// transaction() sends after its commit in the scenario's process. Only Sluice and postgres.js are
// loaded here.
import { GcPauses } from './harness/gc.js';
import { nodeCpuMs } from './harness/counters.js';
import { progress } from './harness/progress.js';
import {
  type FromRebuildProcess,
  type RebuildProcessInput,
  type ToRebuildProcess,
} from './harness/rebuild-dispatcher.js';
import { monotonicMs } from './harness/remote-dispatcher.js';
import { DeliveryTracker } from './harness/tracker.js';
import { benchDispatcher, pool, statsProjection } from './systems/sluice.js';

// The scenario's process is gone: nothing will read the result.
process.on('disconnect', () => {
  process.exit(1);
});

function send(message: FromRebuildProcess): Promise<void> {
  return new Promise((resolve, reject) => {
    process.send?.(message, (error: Error | null) => {
      if (error) reject(error);
      else resolve();
    });
  });
}

async function main(): Promise<void> {
  const raw = process.env['SLUICE_BENCH_REBUILD'];
  if (raw === undefined || typeof process.send !== 'function') {
    throw new Error('rebuild-process.ts is started by the rebuild scenario, not directly');
  }
  const input = JSON.parse(raw) as RebuildProcessInput;
  const { seqFrom, capacity } = input;
  const handledAt = new Float64Array(capacity);
  // Version 1 is caught up on every event below seqFrom: one of them delivered again counts as a
  // duplicate (out of the tracker's range).
  const v1 = new DeliveryTracker(1, capacity);
  const v2 = new DeliveryTracker(1, seqFrom + capacity);
  const v2Times = { firstAt: 0, lastAt: 0 };
  const consumers = input.versions.map((version) =>
    version === 1
      ? statsProjection(1, (seq) => {
          const i = seq - seqFrom;
          if (i >= 0 && i < capacity && handledAt[i] === 0) handledAt[i] = monotonicMs();
          v1.record(0, i);
        })
      : statsProjection(version, (seq) => {
          const at = monotonicMs();
          if (v2Times.firstAt === 0) v2Times.firstAt = at;
          v2Times.lastAt = at;
          v2.record(0, seq);
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
      void v1.whenDistinct(appended - seqFrom, timeoutMs).then((caughtUp) => send({ caughtUp }));
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
    await v1.whenDistinct(appended - seqFrom, timeoutMs);
    if (input.versions.length > 1) await v2.whenDistinct(appended, Math.max(1, deadline - performance.now()));
    await dispatcher.stop();
    await send({
      result: {
        handledAt: Array.from(handledAt),
        v1: { lost: v1.lost(appended - seqFrom), duplicated: v1.duplicated() },
        ...(input.versions.length > 1
          ? { v2: { lost: v2.lost(appended), duplicated: v2.duplicated(), ...v2Times } }
          : {}),
      },
    });
  } finally {
    await sql.end();
  }
}

main().then(
  () => {
    process.exit(0);
  },
  (error: unknown) => {
    progress(
      `rebuild dispatcher process failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`,
    );
    process.exit(1);
  },
);

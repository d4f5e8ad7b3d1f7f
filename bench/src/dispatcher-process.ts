// A Sluice dispatcher in a process of its own, started by the latency scenario
// (harness/remote-dispatcher.ts): one consumer at default options, woken by the NOTIFY the
// appender's transaction() sends after its commit in the other process. Only Sluice and
// postgres.js are loaded here.
import { monotonicMs, runChild, sendToParent } from './harness/child-channel.js';
import { GcPauses, YoungGeneration } from './harness/gc.js';
import type {
  DispatcherProcessInput,
  FromDispatcherProcess,
  ToDispatcherProcess,
} from './harness/remote-dispatcher.js';
import { DeliveryTracker } from './harness/tracker.js';
import { benchConsumers, benchDispatcher, pool } from './systems/sluice.js';

const send = (message: FromDispatcherProcess) => sendToParent(message);

async function main(input: DispatcherProcessInput): Promise<void> {
  const handledAt = new Float64Array(input.total);
  const tracker = new DeliveryTracker(1, input.total);
  const sql = pool(input.url, input.poolSize);
  const consumers = benchConsumers(1, (_consumer, seq) => {
    if (seq >= 0 && seq < input.total && handledAt[seq] === 0) handledAt[seq] = monotonicMs();
    tracker.record(0, seq);
  });
  const dispatcher = benchDispatcher(sql, consumers);
  const gc = new GcPauses();
  const young = new YoungGeneration();
  const finished = new Promise<{ timeoutMs: number }>((resolve) => {
    process.on('message', (message: ToDispatcherProcess) => {
      if ('measure' in message) {
        gc.from = performance.now();
        young.start();
      } else {
        gc.to = performance.now();
        resolve(message.finish);
      }
    });
  });
  try {
    await dispatcher.start();
    await send({ ready: true });
    const { timeoutMs } = await finished;
    const heap = young.stop();
    await tracker.whenComplete(timeoutMs);
    gc.stop();
    await dispatcher.stop();
    await send({
      handledAt: Array.from(handledAt),
      lost: tracker.lost(),
      duplicated: tracker.duplicated(),
      heap: {
        allocatedBytes: heap.allocatedBytes,
        scavengedBytes: heap.scavengedBytes,
        survivedBytes: heap.survivedBytes,
        gcPauseMs: gc.totalMs,
        longestGcPauseMs: gc.longest,
      },
    });
  } finally {
    await sql.end();
  }
}

runChild('SLUICE_BENCH_DISPATCHER', 'dispatcher process', (input) => main(input as DispatcherProcessInput));

import { ChildChannel, localTime } from './child-channel.js';

/**
 * A Sluice dispatcher in a process of its own (src/dispatcher-process.ts), for the latency row
 * whose appender and dispatcher do not share a process, as in an application with a separate
 * worker. Its handler notes when each event arrived on the machine's monotonic clock
 * (process.hrtime, CLOCK_MONOTONIC: the same clock in every process of the machine), and the times
 * come back, with the process's own GC and allocation figures, when the run is finished. Nothing
 * crosses the process boundary per event.
 */

/** What the orchestrating process tells the dispatcher process at its start (SLUICE_BENCH_DISPATCHER). */
export interface DispatcherProcessInput {
  readonly url: string;
  /** Events 0..total-1 are appended; their handler times are sent back. */
  readonly total: number;
  readonly poolSize: number;
}

/** The dispatcher process's young generation and GC pauses over the measured window. */
export interface DispatcherProcessHeap {
  readonly allocatedBytes: number;
  readonly scavengedBytes: number;
  readonly survivedBytes: number;
  readonly gcPauseMs: number;
  readonly longestGcPauseMs: number;
}

export type FromDispatcherProcess =
  | { readonly ready: true }
  | {
      /** Monotonic ms when each event's handler first ran (0: never). */
      readonly handledAt: number[];
      readonly lost: number;
      readonly duplicated: number;
      readonly heap: DispatcherProcessHeap;
    };

export type ToDispatcherProcess = { readonly measure: true } | { readonly finish: { timeoutMs: number } };

export interface RemoteOutcome {
  /** When each event's handler ran, as performance.now() of this process (0: never). */
  readonly handledAt: Float64Array;
  readonly lost: number;
  readonly duplicated: number;
  readonly heap: DispatcherProcessHeap;
}

export class RemoteDispatcher {
  readonly #channel: ChildChannel<FromDispatcherProcess, ToDispatcherProcess>;

  private constructor(channel: ChildChannel<FromDispatcherProcess, ToDispatcherProcess>) {
    this.#channel = channel;
  }

  /** Starts the process; resolves once its dispatcher has started (LISTEN connected). */
  static async start(input: DispatcherProcessInput): Promise<RemoteDispatcher> {
    const { channel } = await ChildChannel.start<FromDispatcherProcess, ToDispatcherProcess>(
      '../dispatcher-process.js',
      'SLUICE_BENCH_DISPATCHER',
      input,
      (m) => 'ready' in m,
    );
    return new RemoteDispatcher(channel);
  }

  /** The measured window starts (allocation and GC pauses are counted from here). */
  measure(): void {
    this.#channel.send({ measure: true });
  }

  /**
   * The measured window ends: the process waits until every event was handled (at most
   * `timeoutMs`), stops its dispatcher and sends back what it measured.
   */
  async finish(timeoutMs: number): Promise<RemoteOutcome> {
    const result = await this.#channel.request({ finish: { timeoutMs } }, (m) => 'handledAt' in m);
    if (!('handledAt' in result)) throw new Error('the dispatcher process sent no result');
    const handledAt = Float64Array.from(result.handledAt, localTime);
    return { handledAt, lost: result.lost, duplicated: result.duplicated, heap: result.heap };
  }

  /** Waits for the process to exit (it does once it has sent its result), killing it after 10 s. */
  stop(): Promise<void> {
    return this.#channel.stop();
  }
}

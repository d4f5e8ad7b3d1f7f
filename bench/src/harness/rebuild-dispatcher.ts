import { ChildChannel, localTime } from './child-channel.js';

/**
 * The rebuild scenario's dispatcher in a process of its own (src/rebuild-process.ts), declaring
 * version 1 of the stats projection, versions 1 and 2 (a deployment that brings version 2 to the
 * serving process), or version 2 alone (the rebuild in a process of its own, beside one serving
 * version 1). As in the latency scenario's row with the dispatcher in another process, version 1's
 * handler notes the time on the machine's monotonic clock (process.hrtime, CLOCK_MONOTONIC), sent
 * back when the phase is over, and its appender is another process: a rebuild that keeps a
 * dispatcher's process busy does not hold up the appender's own clock. Nothing crosses the process
 * boundary per event.
 */

/** What the scenario tells the dispatcher process at its start (SLUICE_BENCH_REBUILD). */
export interface RebuildProcessInput {
  readonly url: string;
  readonly poolSize: number;
  /** The versions of the stats projection this process declares: [1], [1, 2] or [2]. */
  readonly versions: readonly number[];
  /**
   * The events appended in this phase are seq seqFrom … seqFrom + capacity − 1 at most: version 1's
   * handler times are noted for them (version 1 is caught up on every earlier one), and version 2
   * is to have every event of the log, seq 0 … seqFrom + capacity − 1 at most.
   */
  readonly seqFrom: number;
  readonly capacity: number;
}

/** The dispatcher process's CPU time and GC pauses over the measured window. */
export interface RebuildProcessWindow {
  readonly wallMs: number;
  readonly cpuMs: number;
  readonly gcPauseMs: number;
  readonly longestGcPauseMs: number;
}

export interface Deliveries {
  readonly lost: number;
  readonly duplicated: number;
}

/** Version 2's deliveries, and when its handler first and last ran (monotonic ms in the message, 0: never). */
export type RebuildDeliveries = Deliveries & { readonly firstAt: number; readonly lastAt: number };

export type FromRebuildProcess =
  | { readonly ready: { readonly startCalledAt: number } }
  | { readonly window: RebuildProcessWindow }
  | { readonly caughtUp: boolean }
  | {
      readonly result: {
        /**
         * Version 1, when declared: the appended events, seqFrom … appended − 1, and the monotonic ms
         * when its handler first ran for seqFrom + i (0: never).
         */
        readonly v1?: Deliveries & { readonly handledAt: number[] };
        /** Version 2, when declared: every event of the log, 0 … appended − 1. */
        readonly v2?: RebuildDeliveries;
      };
    };

export type ToRebuildProcess =
  | { readonly measure: true }
  | { readonly endMeasure: true }
  /** Resolves once version 1 has handled every event below `appended` (at most timeoutMs); false where it is not declared. */
  | { readonly v1Through: { readonly appended: number; readonly timeoutMs: number } }
  /** Waits for every version to have every event below `appended`, stops and sends the result. */
  | { readonly finish: { readonly appended: number; readonly timeoutMs: number } };

export interface RebuildOutcome {
  /**
   * Version 1, when declared, and when its handler ran for seqFrom + i, as performance.now() of this
   * process (0: never).
   */
  readonly v1?: Deliveries & { readonly handledAt: Float64Array };
  /** Version 2, when declared, its times as performance.now() of this process. */
  readonly v2?: RebuildDeliveries;
}

type Channel = ChildChannel<FromRebuildProcess, ToRebuildProcess>;

export class RebuildDispatcher {
  readonly #channel: Channel;
  /** When the process called the dispatcher's start() (registration, which starts a rebuild), as performance.now(). */
  readonly startCalledAt: number;

  private constructor(channel: Channel, startCalledAt: number) {
    this.#channel = channel;
    this.startCalledAt = startCalledAt;
  }

  /** Starts the process; resolves once its dispatcher has started (registered, LISTEN connected). */
  static async start(input: RebuildProcessInput): Promise<RebuildDispatcher> {
    const { channel, ready } = await ChildChannel.start<FromRebuildProcess, ToRebuildProcess>(
      '../rebuild-process.js',
      'SLUICE_BENCH_REBUILD',
      input,
      (m) => 'ready' in m,
    );
    return new RebuildDispatcher(channel, 'ready' in ready ? localTime(ready.ready.startCalledAt) : 0);
  }

  /** The measured window starts (CPU time and GC pauses are counted from here). */
  measure(): void {
    this.#channel.send({ measure: true });
  }

  /** The measured window ends: the process's CPU time and GC pauses over it. */
  async endMeasure(): Promise<RebuildProcessWindow> {
    const message = await this.#channel.request({ endMeasure: true }, (m) => 'window' in m);
    if (!('window' in message)) throw new Error('the dispatcher process sent no window');
    return message.window;
  }

  /** Whether version 1 handled every event below `appended` within timeoutMs. */
  async v1Through(appended: number, timeoutMs: number): Promise<boolean> {
    const message = await this.#channel.request(
      { v1Through: { appended, timeoutMs } },
      (m) => 'caughtUp' in m,
    );
    return 'caughtUp' in message && message.caughtUp;
  }

  /** Waits (at most timeoutMs) for every declared version to have every event below `appended`; the process then stops. */
  async finish(appended: number, timeoutMs: number): Promise<RebuildOutcome> {
    const message = await this.#channel.request({ finish: { appended, timeoutMs } }, (m) => 'result' in m);
    if (!('result' in message)) throw new Error('the dispatcher process sent no result');
    const { v1, v2 } = message.result;
    return {
      ...(v1 ? { v1: { ...v1, handledAt: Float64Array.from(v1.handledAt, localTime) } } : {}),
      ...(v2 ? { v2: { ...v2, firstAt: localTime(v2.firstAt), lastAt: localTime(v2.lastAt) } } : {}),
    };
  }

  /** Waits for the process to exit (it does once it has sent its result), killing it after 10 s. */
  stop(): Promise<void> {
    return this.#channel.stop();
  }
}

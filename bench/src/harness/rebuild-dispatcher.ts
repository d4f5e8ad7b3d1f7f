import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { monotonicMs } from './remote-dispatcher.js';

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

/** A monotonic time of the other process as performance.now() of this one (the same clock, another origin). */
function local(monotonic: number): number {
  return monotonic === 0 ? 0 : monotonic - (monotonicMs() - performance.now());
}

export class RebuildDispatcher {
  readonly #child: ChildProcess;
  readonly #exited: Promise<void>;
  #onMessage: ((message: FromRebuildProcess) => void) | undefined;
  #onExit: ((error: Error) => void) | undefined;
  #exitError: Error | undefined;
  /** When the process called the dispatcher's start() (registration, which starts a rebuild), as performance.now(). */
  startCalledAt = 0;

  private constructor(child: ChildProcess) {
    this.#child = child;
    child.on('message', (message: FromRebuildProcess) => {
      this.#onMessage?.(message);
    });
    this.#exited = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        this.#exitError = new Error(`the dispatcher process exited with ${signal ?? `code ${String(code)}`}`);
        this.#onExit?.(this.#exitError);
        resolve();
      });
    });
  }

  /** Starts the process; resolves once its dispatcher has started (registered, LISTEN connected). */
  static async start(input: RebuildProcessInput): Promise<RebuildDispatcher> {
    const script = fileURLToPath(new URL('../rebuild-process.js', import.meta.url));
    const child = spawn(process.execPath, [...process.execArgv, script], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      env: { ...process.env, SLUICE_BENCH_REBUILD: JSON.stringify(input) },
    });
    const remote = new RebuildDispatcher(child);
    const ready = await remote.#next((m) => 'ready' in m);
    if ('ready' in ready) remote.startCalledAt = local(ready.ready.startCalledAt);
    return remote;
  }

  /** The measured window starts (CPU time and GC pauses are counted from here). */
  measure(): void {
    this.#child.send({ measure: true } satisfies ToRebuildProcess);
  }

  /** The measured window ends: the process's CPU time and GC pauses over it. */
  async endMeasure(): Promise<RebuildProcessWindow> {
    const reply = this.#next((m) => 'window' in m);
    this.#child.send({ endMeasure: true } satisfies ToRebuildProcess);
    const message = await reply;
    if (!('window' in message)) throw new Error('the dispatcher process sent no window');
    return message.window;
  }

  /** Whether version 1 handled every event below `appended` within timeoutMs. */
  async v1Through(appended: number, timeoutMs: number): Promise<boolean> {
    const reply = this.#next((m) => 'caughtUp' in m);
    this.#child.send({ v1Through: { appended, timeoutMs } } satisfies ToRebuildProcess);
    const message = await reply;
    return 'caughtUp' in message && message.caughtUp;
  }

  /** Waits (at most timeoutMs) for every declared version to have every event below `appended`; the process then stops. */
  async finish(appended: number, timeoutMs: number): Promise<RebuildOutcome> {
    const reply = this.#next((m) => 'result' in m);
    this.#child.send({ finish: { appended, timeoutMs } } satisfies ToRebuildProcess);
    const message = await reply;
    if (!('result' in message)) throw new Error('the dispatcher process sent no result');
    const { v1, v2 } = message.result;
    return {
      ...(v1 ? { v1: { ...v1, handledAt: Float64Array.from(v1.handledAt, local) } } : {}),
      ...(v2 ? { v2: { ...v2, firstAt: local(v2.firstAt), lastAt: local(v2.lastAt) } } : {}),
    };
  }

  /** Waits for the process to exit (it does once it has sent its result), killing it after 10 s. */
  async stop(): Promise<void> {
    if (this.#child.exitCode === null && this.#child.signalCode === null) {
      if (this.#child.connected) this.#child.disconnect();
      const timer = setTimeout(() => this.#child.kill('SIGKILL'), 10_000);
      await this.#exited;
      clearTimeout(timer);
    }
  }

  #next(match: (message: FromRebuildProcess) => boolean): Promise<FromRebuildProcess> {
    return new Promise((resolve, reject) => {
      if (this.#exitError) {
        reject(this.#exitError);
        return;
      }
      this.#onMessage = (message) => {
        if (!match(message)) return;
        this.#onMessage = undefined;
        this.#onExit = undefined;
        resolve(message);
      };
      this.#onExit = reject;
    });
  }
}

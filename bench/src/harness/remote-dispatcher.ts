import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

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

/** The machine's monotonic clock in ms (what the dispatcher process notes). */
export function monotonicMs(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

export interface RemoteOutcome {
  /** When each event's handler ran, as performance.now() of this process (0: never). */
  readonly handledAt: Float64Array;
  readonly lost: number;
  readonly duplicated: number;
  readonly heap: DispatcherProcessHeap;
}

export class RemoteDispatcher {
  readonly #child: ChildProcess;
  readonly #exited: Promise<void>;
  #onMessage: ((message: FromDispatcherProcess) => void) | undefined;
  #onExit: ((error: Error) => void) | undefined;
  #exitError: Error | undefined;

  private constructor(child: ChildProcess) {
    this.#child = child;
    child.on('message', (message: FromDispatcherProcess) => {
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

  /** Starts the process; resolves once its dispatcher has started (LISTEN connected). */
  static async start(input: DispatcherProcessInput): Promise<RemoteDispatcher> {
    const script = fileURLToPath(new URL('../dispatcher-process.js', import.meta.url));
    const child = spawn(process.execPath, [...process.execArgv, script], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      env: { ...process.env, SLUICE_BENCH_DISPATCHER: JSON.stringify(input) },
    });
    const remote = new RemoteDispatcher(child);
    await remote.#next((m) => 'ready' in m);
    return remote;
  }

  /** The measured window starts (allocation and GC pauses are counted from here). */
  measure(): void {
    this.#send({ measure: true });
  }

  /**
   * The measured window ends: the process waits until every event was handled (at most
   * `timeoutMs`), stops its dispatcher and sends back what it measured.
   */
  async finish(timeoutMs: number): Promise<RemoteOutcome> {
    const done = this.#next((m) => 'handledAt' in m);
    this.#send({ finish: { timeoutMs } });
    const result = await done;
    if (!('handledAt' in result)) throw new Error('the dispatcher process sent no result');
    // Its monotonic times, as performance.now() of this process (the same clock, another origin).
    const offset = monotonicMs() - performance.now();
    const handledAt = Float64Array.from(result.handledAt, (at) => (at === 0 ? 0 : at - offset));
    return { handledAt, lost: result.lost, duplicated: result.duplicated, heap: result.heap };
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

  #send(message: ToDispatcherProcess): void {
    this.#child.send(message);
  }

  #next(match: (message: FromDispatcherProcess) => boolean): Promise<FromDispatcherProcess> {
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

import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { progress } from './progress.js';

/**
 * A bench process of its own (a dispatcher apart from its appender: the latency and rebuild
 * scenarios) and the messages it exchanges with the scenario that started it, over Node's IPC
 * channel. Its input travels in an environment variable; nothing crosses per event.
 */
export class ChildChannel<From extends object, To extends object> {
  readonly #child: ChildProcess;
  readonly #exited: Promise<void>;
  #onMessage: ((message: From) => void) | undefined;
  #onExit: ((error: Error) => void) | undefined;
  #exitError: Error | undefined;

  private constructor(child: ChildProcess) {
    this.#child = child;
    child.on('message', (message: From) => {
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

  /**
   * Starts `script` (a file of dist/, relative to this one) with `input` in the environment
   * variable `variable`; resolves with the first message that matches `ready`.
   */
  static async start<From extends object, To extends object>(
    script: string,
    variable: string,
    input: unknown,
    ready: (message: From) => boolean,
  ): Promise<{ channel: ChildChannel<From, To>; ready: From }> {
    const child = spawn(
      process.execPath,
      [...process.execArgv, fileURLToPath(new URL(script, import.meta.url))],
      {
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
        env: { ...process.env, [variable]: JSON.stringify(input) },
      },
    );
    const channel = new ChildChannel<From, To>(child);
    return { channel, ready: await channel.next(ready) };
  }

  send(message: To): void {
    this.#child.send(message);
  }

  /** Sends `message` and resolves with the first answer that matches. */
  async request(message: To, answer: (message: From) => boolean): Promise<From> {
    const reply = this.next(answer);
    this.send(message);
    return reply;
  }

  /** The next message that matches; rejected if the process exits first. */
  next(match: (message: From) => boolean): Promise<From> {
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

  /** Waits for the process to exit (it does once it has sent its result), killing it after 10 s. */
  async stop(): Promise<void> {
    if (this.#child.exitCode === null && this.#child.signalCode === null) {
      if (this.#child.connected) this.#child.disconnect();
      const timer = setTimeout(() => this.#child.kill('SIGKILL'), 10_000);
      await this.#exited;
      clearTimeout(timer);
    }
  }
}

/** The machine's monotonic clock in ms (process.hrtime, CLOCK_MONOTONIC: the same clock in every process). */
export function monotonicMs(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

/** A monotonic time of another process as performance.now() of this one (the same clock, another origin; 0: never). */
export function localTime(monotonic: number): number {
  return monotonic === 0 ? 0 : monotonic - (monotonicMs() - performance.now());
}

// ---- the child's side ---------------------------------------------------------------------------

/** Sends `message` to the scenario's process; resolves once it is written. */
export function sendToParent(message: object): Promise<void> {
  return new Promise((resolve, reject) => {
    process.send?.(message, (error: Error | null) => {
      if (error) reject(error);
      else resolve();
    });
  });
}

/**
 * Runs a child process's `main` with the input its scenario put in `variable`, then exits (1 on a
 * failure, logged, or when the scenario's process is gone: nothing would read the result).
 */
export function runChild(variable: string, label: string, main: (input: unknown) => Promise<void>): void {
  process.on('disconnect', () => {
    process.exit(1);
  });
  const raw = process.env[variable];
  const run =
    raw === undefined || typeof process.send !== 'function'
      ? Promise.reject(new Error(`the ${label} is started by its scenario, not directly`))
      : main(JSON.parse(raw));
  run.then(
    () => {
      process.exit(0);
    },
    (error: unknown) => {
      progress(`${label} failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
      process.exit(1);
    },
  );
}

import { spawn, type ChildProcess } from 'node:child_process';

/** A program started by the pack test, with its output kept for assertions and failure messages. */
export interface Program {
  readonly child: ChildProcess;
  /** stdout and stderr so far, interleaved as they arrived. */
  output(): string;
  /** Resolves with the first match of `pattern` in the output (already there or arriving). */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<RegExpMatchArray>;
  /** Resolves when the program has exited. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export function startProgram(
  command: string,
  args: readonly string[],
  options: { cwd: string; env: NodeJS.ProcessEnv; name: string },
): Program {
  const child = spawn(command, args, { cwd: options.cwd, env: options.env, stdio: ['pipe', 'pipe', 'pipe'] });
  let output = '';
  const waiters = new Set<() => void>();
  const append = (chunk: Buffer) => {
    output += chunk.toString('utf8');
    for (const check of waiters) check();
  };
  child.stdout.on('data', append);
  child.stderr.on('data', append);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('exit', (code, signal) => {
      resolve({ code, signal });
      for (const check of waiters) check();
    });
  });

  function waitFor(pattern: RegExp, timeoutMs = 60_000): Promise<RegExpMatchArray> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const match = pattern.exec(output);
        if (match) {
          done();
          resolve(match);
        } else if (child.exitCode !== null || child.signalCode !== null) {
          done();
          reject(new Error(`${options.name} exited before printing ${String(pattern)}:\n${output}`));
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`${options.name} printed no ${String(pattern)} within ${timeoutMs} ms:\n${output}`));
      }, timeoutMs);
      const done = () => {
        clearTimeout(timer);
        waiters.delete(check);
      };
      waiters.add(check);
      check();
    });
  }

  return { child, output: () => output, waitFor, exited };
}

/** Sends `signal` and waits for the exit; SIGKILL after `timeoutMs` (and the result says so). */
export async function stopProgram(
  program: Program,
  signal: NodeJS.Signals = 'SIGTERM',
  timeoutMs = 30_000,
): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  const { child } = program;
  if (child.exitCode === null && child.signalCode === null) child.kill(signal);
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  try {
    return await program.exited;
  } finally {
    clearTimeout(timer);
  }
}

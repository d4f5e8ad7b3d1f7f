// Child processes of a chaos run: `tsx --conditions=@sluice/source <file>`, each in a process group
// of its own. tsx runs the script in a second node process (and esbuild in a third), so a SIGKILL
// must go to the whole group: killing only the tsx pid would leave the real dispatcher running.
import { closeSync, createWriteStream, openSync } from 'node:fs';
import { spawnScript } from './child.js';
import { now } from './clock.js';

export interface ChildExit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly at: number;
}

export interface ChildHandle {
  /** `disp-1`, `writer-3`. */
  readonly name: string;
  readonly generation: number;
  /** `disp-1#2`. */
  readonly tag: string;
  /** The tsx process: leader of the child's process group. */
  readonly pid: number;
  readonly startedAt: number;
  /** Resolves with the first `CHAOS <word> …` line's words (READY, DONE), when one appears. */
  readonly announced: (word: string) => Promise<string[]>;
  /** The words of the latest `CHAOS <word> …` line, if any. */
  readonly latest: (word: string) => string[] | undefined;
  readonly exited: Promise<ChildExit>;
  readonly exit: ChildExit | undefined;
  /** SIGKILL to the whole process group. */
  kill9(): void;
  /** SIGTERM to the script's own process (no tsx wrapper in between to relay or swallow it). */
  terminate(): void;
}

const live = new Set<ChildHandle>();

export function startChild(options: {
  name: string;
  generation: number;
  /** File name in this folder, e.g. 'dispatcher-process.ts'. */
  script: string;
  config: object;
  logFile: string;
}): ChildHandle {
  const stderrFile = openSync(options.logFile, 'a');
  // stderr (the dispatcher's warnings and errors, bursts of them in a backend-kill storm) goes
  // straight to the log file: writes to a pipe are synchronous on Linux, so a supervisor slow to
  // drain it would freeze the child's event loop and leave its turns idle in transaction.
  const { child, pid } = spawnScript(new URL(options.script, import.meta.url), options.config, stderrFile);
  const log = createWriteStream(options.logFile, { flags: 'a' });
  const announcements = new Map<string, string[]>();
  const latest = new Map<string, string[]>();
  const waiters = new Map<string, ((words: string[]) => void)[]>();
  let buffered = '';
  const stdout = child.stdout;
  if (!stdout) throw new Error(`no stdout pipe for ${options.name}`);
  stdout.on('data', (chunk: Buffer) => {
    log.write(chunk);
    buffered += chunk.toString('utf8');
    let newline: number;
    while ((newline = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, newline);
      buffered = buffered.slice(newline + 1);
      if (!line.startsWith('CHAOS ')) continue;
      const words = line.slice('CHAOS '.length).trim().split(/\s+/);
      const word = words[0] ?? '';
      latest.set(word, words);
      if (announcements.has(word)) continue;
      announcements.set(word, words);
      for (const resolve of waiters.get(word) ?? []) resolve(words);
      waiters.delete(word);
    }
  });
  closeSync(stderrFile); // the child has its own copy
  let exit: ChildExit | undefined;
  const exited = new Promise<ChildExit>((resolve) => {
    child.on('exit', (code, signal) => {
      exit = { code, signal, at: now() };
      live.delete(handle);
      resolve(exit);
    });
  });
  void exited.then(() => {
    setTimeout(() => log.end(), 200).unref();
  });
  const handle: ChildHandle = {
    name: options.name,
    generation: options.generation,
    tag: `${options.name}#${options.generation}`,
    pid,
    startedAt: now(),
    announced: (word) => {
      const words = announcements.get(word);
      if (words) return Promise.resolve(words);
      return new Promise((resolve) => {
        waiters.set(word, [...(waiters.get(word) ?? []), resolve]);
      });
    },
    latest: (word) => latest.get(word),
    exited,
    get exit() {
      return exit;
    },
    kill9() {
      killGroup(pid, 'SIGKILL');
    },
    terminate() {
      if (exit === undefined) child.kill('SIGTERM');
    },
  };
  live.add(handle);
  return handle;
}

function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ESRCH') throw error;
  }
}

/** SIGKILLs every child still running (and whatever is left in their process groups). */
export async function killAllChildren(): Promise<void> {
  const handles = [...live];
  for (const handle of handles) killGroup(handle.pid, 'SIGKILL');
  await Promise.all(handles.map((h) => h.exited));
}

/** Resolves with the child's exit, or rejects after `ms`. */
export async function exitWithin(handle: ChildHandle, ms: number): Promise<ChildExit> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      handle.exited,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          reject(new Error(`${handle.tag} did not exit within ${ms} ms`));
        }, ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

// Shared by the child processes of the e2e suites (the chaos run's dispatchers and writers, the
// scenarios' crash and storm dispatchers, X6's flood) and the two launchers that start them
// (rig/processes.ts, scenarios/support.ts).
import { spawn, type StdioNull, type StdioPipe } from 'node:child_process';
import { setTimeout as delay } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { isAlive } from '@sluice/testing/processes';

const E2E_DIR = fileURLToPath(new URL('../../', import.meta.url));

/**
 * Starts `node --conditions=@sluice/source --import tsx <script>` (Node itself with tsx's loader: the
 * pid we signal is the script's, so SIGTERM reaches its handler) in a process group of its own, with
 * this process's environment but vitest's worker setup and `config` in CHILD_CONFIG.
 */
export function spawnScript(script: URL, config: object, stderr: StdioPipe | number) {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (key === 'NODE_OPTIONS' || key.startsWith('VITEST') || key === 'TEST') continue;
    env[key] = value;
  }
  env['CHILD_CONFIG'] = JSON.stringify(config);
  const stdio: [StdioNull, StdioPipe, StdioPipe | number] = ['ignore', 'pipe', stderr];
  const child = spawn(
    process.execPath,
    ['--conditions=@sluice/source', '--import', 'tsx', fileURLToPath(script)],
    {
      cwd: E2E_DIR,
      env,
      detached: true,
      stdio,
    },
  );
  if (child.pid === undefined) throw new Error(`could not start ${fileURLToPath(script)}`);
  return { child, pid: child.pid };
}

/**
 * The child's configuration, passed by its launcher as JSON in CHILD_CONFIG; from then on the child
 * exits once the test process that started it is gone.
 */
export function childConfig(): { readonly parentPid: number } {
  const raw = process.env['CHILD_CONFIG'];
  if (raw === undefined) throw new Error('CHILD_CONFIG is not set: this file is started by an e2e test');
  const config = JSON.parse(raw) as { readonly parentPid: number };
  exitWithParent(config.parentPid);
  return config;
}

/**
 * Exits when the supervisor is gone (its test process was killed): children run in their own
 * process groups and must never outlive the run.
 */
export function exitWithParent(parentPid: number): void {
  const timer = setInterval(() => {
    if (!isAlive(parentPid)) process.exit(70);
  }, 500);
  timer.unref();
}

/** Sleeps `ms` milliseconds (fractional allowed). */
export function sleep(ms: number): Promise<void> {
  return delay(Math.max(0, Math.round(ms)));
}

/** A small seeded PRNG (mulberry32), so a run's choices can be replayed from its seed. */
export function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Shared by the chaos child processes (dispatchers and writers).
import { setTimeout as delay } from 'node:timers/promises';
import { isAlive } from '@sluice/testing/processes';

/** The child's configuration, passed by the supervisor as JSON in CHAOS_CHILD. */
export function childConfig(): unknown {
  const raw = process.env['CHAOS_CHILD'];
  if (raw === undefined)
    throw new Error('CHAOS_CHILD is not set: this file is started by the chaos supervisor');
  return JSON.parse(raw);
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

import type { Dispatcher, PassResult } from '@sluice/core';
import { setTimeout as delay } from 'node:timers/promises';
import { until } from './until.js';

export interface DrainOptions {
  /** Give up (and throw) after this long. @defaultValue 10_000 */
  timeoutMs?: number;
}

/** Skips that mean "nothing more will happen for this consumer without an operator or a config change". */
const SETTLED_SKIPS = new Set(['dead', 'disabled', 'feature-off', 'version', 'other-key']);

/**
 * Runs passes until one processes nothing, fails nothing, and leaves every live consumer at the
 * log head with no pending gap. Returns the passes. Waits on the database, never on a fixed sleep;
 * between idle passes it yields for a few milliseconds so it does not spin.
 * @throws when the dispatcher is still busy after `timeoutMs`, with `diagnose` of each unsettled
 * consumer: why it is not moving, and which backend holds its gaps open (when `@sluice/admin`, an
 * optional peer dependency, is installed)
 */
export async function drainUntilIdle(
  dispatcher: Dispatcher,
  options: DrainOptions = {},
): Promise<PassResult[]> {
  const timeoutMs = options.timeoutMs ?? 10_000;
  const deadline = Date.now() + timeoutMs;
  const passes: PassResult[] = [];
  for (;;) {
    const pass = await dispatcher.runOnce();
    passes.push(pass);
    const unsettled = Object.entries(pass.byConsumer).filter(
      ([, c]) =>
        !((c.skipped !== undefined && SETTLED_SKIPS.has(c.skipped)) || (c.pendingGaps === 0 && !c.behind)),
    );
    if (pass.processed === 0 && pass.failed === 0 && unsettled.length === 0) return passes;
    if (Date.now() > deadline) {
      throw new Error(
        `drainUntilIdle: the dispatcher is still busy after ${timeoutMs} ms (${passes.length} passes).\n` +
          (await explain(
            dispatcher,
            unsettled.map(([name]) => name),
          )),
      );
    }
    if (pass.processed === 0) await delay(5);
  }
}

async function explain(dispatcher: Dispatcher, names: readonly string[]): Promise<string> {
  // Imported only here, on the failure path: the diagnosis is the one use of @sluice/admin.
  let createAdmin;
  try {
    ({ createAdmin } = await import('@sluice/admin'));
  } catch (error) {
    return `unsettled consumers: ${names.join(', ')} (@sluice/admin, which would say why, did not load: ${(error as Error).message})`;
  }
  const admin = createAdmin({ sql: dispatcher.sql, schema: dispatcher.schema });
  const lines: string[] = [];
  for (const name of names) {
    try {
      const diagnosis = await admin.diagnose(name);
      lines.push(`${name}:`, ...diagnosis.findings.map((finding) => `  - ${finding}`));
    } catch (error) {
      lines.push(`${name}: could not diagnose (${(error as Error).message})`);
    }
  }
  return lines.join('\n');
}

/**
 * Runs passes until `condition` holds, then resolves; throws naming `what` after `timeoutMs` (other
 * sessions' transactions may hold the xmin horizon a moment, so a burn or a late commit can take a
 * few passes).
 */
export async function passUntil(
  dispatcher: { runOnce(): Promise<unknown> },
  condition: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 15_000,
): Promise<void> {
  await until(
    async () => {
      await dispatcher.runOnce();
      return condition();
    },
    timeoutMs,
    what,
  );
}

import { InvalidOptionError } from '@sluice/core';
import { collectStaleInstances as collect, MAX_AGE_MS, type CollectedInstance } from '@sluice/core/internal';
import type { AdminContext } from '../context.js';
import { checkText } from '../validate.js';

export type StaleInstance = CollectedInstance;

/**
 * Deletes per-instance cursor rows (and their gaps) of instances not seen for `olderThanMs`
 * (docs/design.md §4.9, per-instance). Rows locked by a running turn are left alone: that instance is alive.
 * An instance that was only cut off from the database re-registers its row where it was, from what
 * the audit records here (pending gaps are delivered again from their lowest id).
 * @throws {InvalidOptionError}
 */
export async function collectStaleInstances(
  ctx: AdminContext,
  options: { olderThanMs: number; actor?: string } = {} as { olderThanMs: number },
): Promise<{ removed: readonly StaleInstance[] }> {
  const { olderThanMs } = options;
  if (
    typeof olderThanMs !== 'number' ||
    !Number.isSafeInteger(olderThanMs) ||
    olderThanMs < 60_000 ||
    olderThanMs > MAX_AGE_MS
  ) {
    throw new InvalidOptionError(
      'olderThanMs',
      `must be an integer from 60000 (one minute) to ${MAX_AGE_MS} (ten years)`,
    );
  }
  const actor = checkText(options.actor, 'actor', 200) ?? ctx.defaultActor;
  return { removed: await collect(ctx.sql, ctx.tables, olderThanMs, actor) };
}

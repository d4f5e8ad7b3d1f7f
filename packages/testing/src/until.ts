import type { Sql } from '@sluice/core';

/**
 * Resolves with the first value of `probe` that is neither false, undefined nor null, asking every
 * `everyMs` (on the monotonic clock); rejects, naming `what` (a function: read when it fails), after
 * `timeoutMs`. For waiting on something a test can observe (a handler ran, a backend is parked, a
 * row changed), never for letting time pass.
 */
export async function until<T>(
  probe: () => T | Promise<T>,
  timeoutMs = 10_000,
  what: string | (() => string) = 'a condition',
  everyMs = 5,
): Promise<Exclude<T, false | undefined | null>> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== false && value !== undefined && value !== null)
      return value as Exclude<T, false | undefined | null>;
    if (performance.now() > deadline) {
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${typeof what === 'string' ? what : what()}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

/** A promise with its opener: a gate a handler waits on until the test lets it through. */
export function gate(): { readonly promise: Promise<void>; readonly open: () => void } {
  let open: () => void = () => undefined;
  const promise = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { promise, open };
}

/**
 * Resolves once a session waits on a consumer's row lock (the `for update of c` an operator action
 * or a turn takes, or another statement whose text is `like` the pattern given): the action was
 * issued and is now behind the turn that holds the row.
 */
export async function untilWaitingForConsumerRow(
  sql: Sql,
  timeoutMs = 10_000,
  like = '%for update of c%',
): Promise<void> {
  await until(
    async () =>
      (
        await sql`
          select 1 from pg_stat_activity
          where wait_event_type = 'Lock' and state = 'active' and query like ${like}`
      ).length > 0,
    timeoutMs,
    'a session to wait for the consumer row',
  );
}

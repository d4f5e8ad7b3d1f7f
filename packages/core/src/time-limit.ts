/** What {@link settleWithin} returns for a promise that has not settled in time. */
export const TIMED_OUT = Symbol('timed out');

/**
 * `promise`'s outcome (its value, or its rejection) if it settles within `ms`, else
 * {@link TIMED_OUT}. The timer never outlives the race; the promise itself is left running.
 */
export async function settleWithin<T>(promise: Promise<T>, ms: number): Promise<T | typeof TIMED_OUT> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<typeof TIMED_OUT>((resolve) => {
    timer = setTimeout(() => {
      resolve(TIMED_OUT);
    }, ms);
  });
  try {
    return await Promise.race([promise, expired]);
  } finally {
    clearTimeout(timer);
  }
}

/** What {@link settleWithin} returns for a promise that has not settled in time. */
export const TIMED_OUT = Symbol('timed out');

/**
 * `promise`'s outcome (its value, or its rejection) if it settles within `ms`, else
 * {@link TIMED_OUT}. The timer never outlives the race; the promise itself is left running.
 * Written without async/await or Promise.race, which add promises and an async frame of their own:
 * it runs on every handler call and every idle tick.
 */
export function settleWithin<T>(promise: Promise<T>, ms: number): Promise<T | typeof TIMED_OUT> {
  return new Promise<T | typeof TIMED_OUT>((resolve, reject) => {
    const timer = setTimeout(resolve, ms, TIMED_OUT);
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- the promise's own rejection, passed on as it is
        reject(error);
      },
    );
  });
}

// One clock for every process of a chaos run: CLOCK_MONOTONIC is shared by all processes on the
// machine (unlike performance.timeOrigin, which is a per-process wall-clock reading), so times
// recorded by writers, dispatchers and the supervisor can be compared with microsecond precision.

/** Milliseconds since boot on CLOCK_MONOTONIC, with microsecond precision. */
export function now(): number {
  return Number(process.hrtime.bigint() / 1000n) / 1000;
}

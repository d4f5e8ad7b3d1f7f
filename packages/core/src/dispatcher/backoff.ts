/**
 * Per-consumer backoff after infrastructure failures (docs/design.md §4.5): 1 s, doubling, capped at 60 s
 * by default; a successful turn clears it. Plain state and pure functions; the clock is passed in
 * (the caller's monotonic clock, performance.now(): a wall-clock step must not change a backoff).
 */
export interface BackoffState {
  readonly failures: number;
  readonly untilMs: number;
}

export function nextBackoff(
  previous: BackoffState | undefined,
  nowMs: number,
  initialMs: number,
  maxMs: number,
): BackoffState {
  const failures = (previous?.failures ?? 0) + 1;
  const delayMs = Math.min(maxMs, initialMs * 2 ** Math.min(failures - 1, 30));
  return { failures, untilMs: nowMs + delayMs };
}

export function isBackingOff(state: BackoffState | undefined, nowMs: number): boolean {
  return state !== undefined && nowMs < state.untilMs;
}

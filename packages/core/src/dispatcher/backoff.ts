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

/**
 * How long a consumer waits after `attempts` failed handler attempts before the next one:
 * retryDelayMs doubling per attempt, capped (the clock is the database's: last_error_at, now()).
 */
export function retryDelayMs(
  attempts: number,
  rules: { retryDelayMs: number; retryMaxDelayMs: number },
): number {
  if (attempts <= 0 || rules.retryDelayMs === 0) return 0;
  return Math.min(rules.retryMaxDelayMs, rules.retryDelayMs * 2 ** Math.min(attempts - 1, 30));
}

/** What the retry delay is judged from: the failures on the stuck event and when the last was. */
export interface RetryState {
  readonly attempts: number;
  /** The consumer is stuck on an event (it failed on it and has not delivered it yet). */
  readonly stuck: boolean;
  readonly lastErrorAt: Date | null;
}

/** Whether a consumer that failed on an event must still wait before retrying it. */
export function isWaitingToRetry(
  failure: RetryState,
  now: Date,
  rules: { retryDelayMs: number; retryMaxDelayMs: number },
): boolean {
  if (failure.attempts <= 0 || !failure.stuck || failure.lastErrorAt === null) return false;
  return now.getTime() - failure.lastErrorAt.getTime() < retryDelayMs(failure.attempts, rules);
}

/** The retry state of a consumer row as the queries return it. */
export function retryStateOf(row: {
  readonly attempts: number;
  readonly stuck_event_id: string | null;
  readonly last_error_at: Date | null;
}): RetryState {
  return { attempts: row.attempts, stuck: row.stuck_event_id !== null, lastErrorAt: row.last_error_at };
}

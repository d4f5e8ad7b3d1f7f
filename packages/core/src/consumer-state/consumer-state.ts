// What a consumer's row says, as the turn and the operators decide on it: the row read once it is
// held (docs/design.md §4.3), parsed into exact values (ids and xids as bigints). Pure.
import { parseSnapshot, parseXidList, type Snapshot } from '../gaps/gaps.js';
import type { LockedRow, OperatorRow } from '../queries/consumers.js';

export type ConsumerStatus = 'idle' | 'processing' | 'dead' | 'disabled';

/**
 * A turn start that has not committed (turn_starts, crash accounting): every start counted here
 * that is still there at the next turn was a process that died inside a handler.
 */
export interface CrashMarker {
  /** First and last id of the batch that was being delivered. */
  readonly first: bigint;
  readonly last: bigint;
  /** Starts at `first` that never committed. */
  readonly started: number;
  /** Deliver one event per turn up to here (pinning the event that kills the process). */
  readonly isolateUntil: bigint | null;
}

/** startFrom 'now': the events in flight at registration still to deliver (see queries/events.ts). */
export interface StartInFlight {
  readonly snapshot: string;
  readonly fence: bigint;
  readonly upto: bigint;
  /** Delivered up to here (0: none yet). */
  readonly after: bigint;
}

export interface ConsumerState {
  readonly status: ConsumerStatus;
  readonly cursor: bigint;
  /** Consecutive failures on stuckEventId. */
  readonly attempts: number;
  readonly stuckEventId: bigint | null;
  /** An operator skipped this event: the next turn resolves it without the handler. */
  readonly skipEventId: bigint | null;
  readonly rearmCount: number;
  readonly lastError: string | null;
  readonly lastErrorAt: Date | null;
  /**
   * 'handler-timeout': a transactional handler's timeout, whose turn was rolled back, used up the
   * attempts on stuckEventId (see DeliveryPlan.spent); else the row's failure_category.
   */
  readonly failureCategory: string | null;
  readonly updatedAt: Date;
  readonly disabledUntil: Date | null;
  readonly gapCount: number;
  readonly gapsUnfenced: number;
  readonly gapsRecheck: boolean;
  /** Transactions running below the highest fence at the last check (see runningBelow in gaps/gaps.ts). */
  readonly gapWatch: readonly bigint[];
  readonly start: StartInFlight | null;
  /** The cluster the row's fences were taken on. */
  readonly systemIdentifier: string | null;
  /** Dead letters of this consumer whose replay an operator asked for. */
  readonly replaysPending: boolean;
}

/** The row a turn holds, with what it read once it held it. */
export interface HeldState {
  readonly state: ConsumerState;
  /** The turn's xid (the row lock assigned it): the fence for holes earlier turns observed. */
  readonly xid: bigint;
  /** Taken once the row was held. */
  readonly snapshot: Snapshot;
  /** The database's clock once the row was held. */
  readonly now: Date;
  /** The highest fence of the consumer's pending ranges. */
  readonly maxFence: bigint | null;
  /** The 32-bit xid that last wrote the row (see {@link cleanViewOf}). */
  readonly rowXmin: bigint;
  readonly marker: CrashMarker | null;
  /** A change of the consumer's lane count in progress (docs/design.md §11.3). */
  readonly laneChange: LaneChange | null;
  /** Some parked key of the consumer is to be replayed. */
  readonly parkedReplays: boolean;
  /**
   * Some key of the consumer is parked: its later events are set aside whatever this process's
   * errorPolicy.parkKey says (another process of a rolling deployment may have parked it).
   */
  readonly parkedKeys: boolean;
}

/** A change of a laned consumer's lane count in progress (lane_changes). */
export interface LaneChange {
  readonly from: number;
  readonly to: number;
  /** The old lanes deliver up to here; the new ones start from here. */
  readonly barrier: bigint;
  /** The new lanes exist: the old ones only resolve their pending gaps, then go. */
  readonly switched: boolean;
}

const big = (text: string | null): bigint | null => (text === null ? null : BigInt(text));

/** Parses a consumer row (ids and xids come as text: exact). */
export function consumerStateOf(row: LockedRow | OperatorRow): ConsumerState {
  const start =
    row.start_snapshot !== null && row.start_fence !== null && row.start_upto !== null
      ? {
          snapshot: row.start_snapshot,
          fence: BigInt(row.start_fence),
          upto: BigInt(row.start_upto),
          after: big(row.start_after) ?? 0n,
        }
      : null;
  return {
    status: row.status,
    cursor: BigInt(row.cursor),
    attempts: row.attempts,
    stuckEventId: big(row.stuck_event_id),
    skipEventId: big(row.skip_event_id),
    rearmCount: row.rearm_count,
    lastError: row.last_error,
    lastErrorAt: row.last_error_at,
    failureCategory: row.failure_category,
    updatedAt: row.updated_at,
    disabledUntil: row.disabled_until,
    gapCount: row.gap_count,
    gapsUnfenced: row.gaps_unfenced,
    gapsRecheck: row.gaps_recheck,
    gapWatch: parseXidList(row.gap_watch),
    start,
    systemIdentifier: row.system_identifier,
    replaysPending: row.replays_pending,
  };
}

/** The row a turn holds (lockConsumer's read), parsed. */
export function heldStateOf(row: LockedRow): HeldState {
  const markerFirst = big(row.marker_first);
  return {
    state: consumerStateOf(row),
    xid: BigInt(row.xid),
    snapshot: parseSnapshot(row.snapshot),
    now: row.now,
    maxFence: big(row.max_fence),
    rowXmin: BigInt(row.row_xmin),
    marker:
      markerFirst === null
        ? null
        : {
            first: markerFirst,
            last: big(row.marker_last) ?? markerFirst,
            started: row.marker_started ?? 0,
            isolateUntil: big(row.marker_isolate_until),
          },
    laneChange:
      row.lane_from === null || row.lane_to === null || row.lane_barrier === null
        ? null
        : {
            from: row.lane_from,
            to: row.lane_to,
            barrier: BigInt(row.lane_barrier),
            switched: row.lane_switched === true,
          },
    parkedReplays: row.parked_replays,
    parkedKeys: row.parked_keys,
  };
}

// ---- a clean view (crash accounting) ---------------------------------------------------------

/**
 * Whether this process has a clean view of the consumer (docs/design.md §4.7): the row is as this
 * process's last committed turn left it (no other process, operator or failure wrote it since),
 * and no crashed start is pending. Then a turn that dies inside a handler can only be this
 * process dying, and its start need not be recorded first: the next process's first turn records
 * it. The cost is one uncounted crash per process that had a clean view when it died.
 * @param lastWrite the row's xmin as this process's last committed turn left it, if it has one
 */
export function cleanViewOf(held: HeldState, lastWrite: bigint | undefined): boolean {
  return lastWrite !== undefined && lastWrite === held.rowXmin && held.marker === null;
}

// ---- the retry delay (a failed event waits before its next attempt) ------------------------

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

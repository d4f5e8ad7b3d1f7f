// The consumer's state machine, in one place (docs/design.md §4.3, §6): what a consumer's row says
// once it is held, parsed into exact values (ids and xids as bigints); how one turn goes through it
// (whether the turn runs, which ranges it re-fetches, what it delivers, what the row becomes); the
// dead → idle re-arm rule; and the operator's transitions (restart, skip, disable, enable, fence,
// replay), which decide what the row becomes or refuse with a typed error. Pure: dispatcher/turn.ts
// and queries/operator.ts read, call these, and write what they return; @sluice/admin validates
// input and calls both.
import {
  BelowRetentionFloorError,
  BeyondHeadError,
  LaneChangeInProgressError,
  NotAGapError,
  SkipMismatchError,
} from '../errors.js';
import {
  type FetchResult,
  type GapRange,
  type Ordering,
  type Settlement,
  type Snapshot,
  type TurnInput,
  lowestEnded,
  parseSnapshot,
  parseXidList,
  runningBelow,
  settleStragglers,
} from '../gaps/gaps.js';
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

// ---- the dead → idle re-arm rule (docs/design.md §6.1) ------------------------------------------

/**
 * The dead → idle rule (docs/design.md §6.1): a dead consumer whose last write is older than the cooldown is
 * re-armed, at most maxRearmCount times since the last turn that advanced its cursor.
 */
export type RearmDecision = 'rearm' | 'cooling-down' | 'exhausted';

export function rearmDecision(
  consumer: { readonly rearmCount: number; readonly lastWriteAt: Date },
  now: Date,
  rules: { readonly rearmCooldownMs: number; readonly maxRearmCount: number },
): RearmDecision {
  if (consumer.rearmCount >= rules.maxRearmCount) return 'exhausted';
  return now.getTime() - consumer.lastWriteAt.getTime() >= rules.rearmCooldownMs ? 'rearm' : 'cooling-down';
}

// ---- one turn through the machine ---------------------------------------------------------------

/** What a turn needs to know of its consumer's options. */
export interface TurnRules {
  readonly maxAttempts: number;
  readonly skipApplyErrors: boolean;
  /**
   * Its handler's writes commit with the turn (docs/design.md §4.4): a failure it records is
   * delivered on its own (see planDelivery).
   */
  readonly transactional: boolean;
  readonly ordering: Ordering;
  readonly retryDelayMs: number;
  readonly retryMaxDelayMs: number;
  readonly rearmCooldownMs: number;
  readonly maxRearmCount: number;
  /** A shared consumer (one row for every instance); a per-instance row writes its heartbeat. */
  readonly shared: boolean;
}

/** Which pending ranges a turn re-fetches (see queries/gaps.ts, selectRangesToRecheck). */
export interface RecheckFilter {
  readonly all: boolean;
  readonly xmin: bigint;
  readonly lowestEnded: bigint | null;
}

export type Opening =
  | {
      readonly kind: 'skip';
      readonly reason: 'disabled' | 'dead' | 'retry-later';
      /** Dead, and its automatic re-arms are used up (reported once per process). */
      readonly rearmExhausted: boolean;
    }
  | {
      readonly kind: 'open';
      /** Written before anything else: a time-boxed disable ended, or a dead consumer re-armed. */
      readonly change: 'reenabled' | 'rearmed' | null;
      /** The state the turn goes on from (after `change`). */
      readonly state: ConsumerState;
      /** Which pending ranges to re-fetch; null: none. */
      readonly recheck: RecheckFilter | null;
      /** 'now' consumers: the events in flight at registration, due now. */
      readonly stragglers: StartInFlight | undefined;
      /** The row's fences were taken on another cluster (a restore): resolve every range afresh. */
      readonly clusterChanged: boolean;
    };

/**
 * Whether the turn runs, and from what (docs/design.md §6.1): a disabled
 * consumer waits until its time-boxed disable ends; a dead one until its cooldown re-arms it
 * (within its budget); a failed event waits out its retry delay unless an operator skipped it.
 * Times are the database's (`held.now`, and the stored times).
 */
export function openTurn(held: HeldState, systemIdentifier: string | null, rules: TurnRules): Opening {
  const { now, snapshot } = held;
  let state = held.state;
  let change: 'reenabled' | 'rearmed' | null = null;
  if (state.status === 'disabled') {
    if (state.disabledUntil === null || state.disabledUntil > now) {
      return { kind: 'skip', reason: 'disabled', rearmExhausted: false };
    }
    change = 'reenabled';
    state = { ...state, status: 'idle', disabledUntil: null };
  } else if (state.status === 'dead') {
    const decision = rearmDecision(
      { rearmCount: state.rearmCount, lastWriteAt: state.updatedAt },
      now,
      rules,
    );
    if (decision !== 'rearm')
      return { kind: 'skip', reason: 'dead', rearmExhausted: decision === 'exhausted' };
    change = 'rearmed';
    state = { ...state, status: 'idle', attempts: 0, rearmCount: state.rearmCount + 1 };
  }
  const failed = {
    attempts: state.attempts,
    stuck: state.stuckEventId !== null,
    lastErrorAt: state.lastErrorAt,
  };
  if (state.skipEventId === null && isWaitingToRetry(failed, now, rules)) {
    return { kind: 'skip', reason: 'retry-later', rearmExhausted: false };
  }
  const clusterChanged =
    systemIdentifier !== null &&
    state.systemIdentifier !== null &&
    state.systemIdentifier !== systemIdentifier;
  const recheck =
    state.gapCount > 0 || clusterChanged
      ? {
          all: state.gapsRecheck || clusterChanged || rules.ordering === 'strict',
          xmin: snapshot.xmin,
          lowestEnded: lowestEnded(state.gapWatch, snapshot),
        }
      : null;
  return { kind: 'open', change, state, recheck, stragglers: stragglersDue(state, snapshot), clusterChanged };
}

/** What a turn fetches besides the events above its cursor, chosen by a snapshot. */
export interface FetchChoice {
  readonly recheck: RecheckFilter | null;
  readonly stragglers: StartInFlight | undefined;
}

/**
 * The choice of what to fetch made again, when the fetch read a newer snapshot than the one it was
 * made by (docs/design.md §5.5); undefined when it stands. The ranges to re-fetch and the
 * stragglers due are chosen by the snapshot of the row read, but the fetch is a later statement
 * (or another turn's read): a watched writer may have ended in between, or the last transaction in
 * flight at a 'now' registration. That writer's events are then visible to the fetch, which did not
 * look for them, while events appended after they committed are in it: delivering those first would
 * put an event ahead of an earlier one that had committed before it was appended. So whenever one of
 * the fetch's snapshots shows such an ending, the turn chooses again by it and fetches again.
 * Each choice takes in more endings, of a finite watch: the turn's fetches come to an end.
 */
export function choiceOvertaken(
  state: ConsumerState,
  choice: FetchChoice,
  snapshots: readonly Snapshot[],
): FetchChoice | undefined {
  let { recheck, stragglers } = choice;
  for (const snapshot of snapshots) {
    if (recheck !== null && !recheck.all) {
      const ended = lowestEnded(state.gapWatch, snapshot);
      if (ended !== null && (recheck.lowestEnded === null || ended < recheck.lowestEnded)) {
        recheck = {
          all: false,
          xmin: snapshot.xmin > recheck.xmin ? snapshot.xmin : recheck.xmin,
          lowestEnded: ended,
        };
      }
    }
    stragglers ??= stragglersDue(state, snapshot);
  }
  return recheck === choice.recheck && stragglers === choice.stragglers ? undefined : { recheck, stragglers };
}

/**
 * A 'now' consumer's in-flight events, when they are due: every transaction that was in flight at
 * its registration has ended (the snapshot taken once the row is held has passed the
 * registration's fence), so every one of them that committed is visible to this turn's fetch.
 */
function stragglersDue(state: ConsumerState, snapshot: Snapshot): StartInFlight | undefined {
  return state.start !== null && snapshot.xmin > state.start.fence ? state.start : undefined;
}

/**
 * Holes observed by earlier turns get this turn's xid as their fence: the row lock assigned it,
 * after the commit of the turn that observed them, so after their observing snapshot (never the
 * snapshot's xmax: a running writer can hold an xid above it).
 */
export function fenced(ranges: readonly GapRange[], xid: bigint): GapRange[] {
  return ranges.map((r) => (r.fence === null ? { ...r, fence: xid } : r));
}

/**
 * Whether a turn that found nothing to deliver has nothing to write either: a shared consumer
 * already idle, with no failed attempt, pending gap, skip, replay, start, crash record, re-arm or
 * change of lane count in progress, and a row written in this cluster. (A per-instance row still writes: its last_seen_at says the
 * instance lives.) Its COMMIT then has no xid to flush.
 */
export function hasNothingToRecord(
  held: HeldState,
  opening: Extract<Opening, { kind: 'open' }>,
  systemIdentifier: string | null,
  rules: TurnRules,
  recheckedCount: number,
): boolean {
  const { state } = opening;
  return (
    rules.shared &&
    opening.change === null &&
    held.state.status === 'idle' &&
    state.attempts === 0 &&
    state.gapCount === 0 &&
    state.skipEventId === null &&
    !state.replaysPending &&
    state.start === null &&
    state.stuckEventId === null &&
    state.gapsUnfenced === 0 &&
    !state.gapsRecheck &&
    recheckedCount === 0 &&
    held.marker === null &&
    held.laneChange === null &&
    (systemIdentifier === null || state.systemIdentifier === systemIdentifier)
  );
}

/** What a turn delivers, and how earlier failures and crashes count against it. */
export interface DeliveryPlan {
  /** In order: the deliverable ids, or only the first while isolating a crashed batch. */
  readonly ids: readonly bigint[];
  readonly isolating: boolean;
  readonly isolateUntil: bigint | null;
  /** Crashed starts counted against this turn's first event. */
  readonly crashes: number;
  /** Failures already counted for an event (committed attempts plus crashed starts). */
  readonly priorAttempts: (id: bigint) => number;
  /**
   * The process died maxAttempts times on the first event: it is not handed to the handler again
   * (it goes to the dead letters with skipApplyErrors, else the consumer is dead).
   */
  readonly crashedOut: boolean;
  /**
   * The error of an event whose attempts a transactional handler's timeout used up: that turn was
   * rolled back whole, so it could apply no error policy. The policy (dead letter, parked key, or
   * the consumer ended) applies to the event in a later turn without another call. Undefined for
   * every other event, and for attempts used up otherwise (a lower maxAttempts deployed, a dead
   * consumer enabled again: those get one more call).
   */
  readonly spent: (id: bigint) => string | undefined;
  /** The next turn start counts afresh (a re-arm resets attempts, crashed ones included). */
  readonly resetStartCount: boolean;
}

/**
 * Plans the delivery of `deliverable` (crash accounting, docs/design.md §4.7): a
 * start at this batch that never committed was a crash. After a crash the batch is delivered one
 * event per turn up to its last id, so the crashes land on the event that causes them; they count
 * against the event that starts the turn.
 * @param resolvesUnhandled events an operator skipped, and tombstones: resolved without the handler
 */
export function planDelivery(
  held: HeldState,
  state: ConsumerState,
  rearmed: boolean,
  deliverable: readonly bigint[],
  resolvesUnhandled: (id: bigint) => boolean,
  rules: TurnRules,
): DeliveryPlan {
  const marker: CrashMarker | null = held.marker;
  const crashed = rearmed ? 0 : (marker?.started ?? 0);
  const isolateUntil =
    marker !== null && (crashed > 0 || marker.isolateUntil !== null)
      ? max(marker.last, marker.isolateUntil ?? 0n)
      : null;
  const firstId = deliverable[0];
  const isolating = isolateUntil !== null && firstId !== undefined && firstId <= isolateUntil;
  const ids = isolating ? deliverable.slice(0, 1) : pinStuck(deliverable, state, rules);
  // Crashes count against the event that starts the turn: the one they happened on, or, while
  // isolating, the next event of a crashed batch (they were not the earlier events' doing).
  const chargedCrashes =
    marker !== null &&
    firstId !== undefined &&
    (marker.first === firstId || (isolating && marker.first < firstId))
      ? crashed
      : 0;
  const priorAttempts = (id: bigint) =>
    (state.stuckEventId === id ? state.attempts : 0) + (id === firstId ? chargedCrashes : 0);
  // Only a crash ends an event unhandled. Failed attempts that the row already counts up to
  // maxAttempts without one (a dead consumer disabled and enabled again, a lower maxAttempts
  // deployed) get one more call: its failure ends the consumer with its own error.
  const crashedOut =
    firstId !== undefined &&
    chargedCrashes > 0 &&
    !resolvesUnhandled(firstId) &&
    priorAttempts(firstId) >= rules.maxAttempts;
  const spentId =
    rules.transactional &&
    state.failureCategory === 'handler-timeout' &&
    state.stuckEventId !== null &&
    state.attempts >= rules.maxAttempts
      ? state.stuckEventId
      : null;
  const spentError = state.lastError ?? `event ${spentId} used up its ${rules.maxAttempts} attempts`;
  return {
    ids,
    isolating,
    isolateUntil,
    crashes: crashed,
    priorAttempts,
    crashedOut,
    spent: (id) => (id === spentId ? spentError : undefined),
    resetStartCount: rearmed,
  };
}

/**
 * A transactional consumer's turn that fails by a handler's timeout is rolled back whole, with what
 * it did for the events before (their writes, a dead letter or parked key another failure earned):
 * only the attempt is recorded, on the event that timed out. So the events before a recorded
 * failure are delivered in a turn of their own, and the failing event alone in the next: each turn
 * commits something, and a later event's timeout cannot undo an earlier one's policy again and
 * again (docs/design.md §4.4).
 */
function pinStuck(deliverable: readonly bigint[], state: ConsumerState, rules: TurnRules): readonly bigint[] {
  if (!rules.transactional || state.stuckEventId === null) return deliverable;
  const at = deliverable.indexOf(state.stuckEventId);
  return at === -1 ? deliverable : deliverable.slice(0, at === 0 ? 1 : at);
}

/** What the handlers did with a turn's delivery. */
export interface Delivered {
  /** Resolved ids, in order: a prefix of the plan's ids. */
  readonly resolvedIds: readonly bigint[];
  readonly failure:
    { readonly eventId: bigint; readonly attempts: number; readonly message: string } | undefined;
  /** The failure used up maxAttempts (and skipApplyErrors is off). */
  readonly dead: boolean;
}

/** The consumer row after a turn (what queries/consumers.ts saveTurn writes), and what follows. */
export interface TurnClose {
  readonly cursor: bigint;
  readonly status: 'idle' | 'processing' | 'dead';
  readonly attempts: number;
  readonly stuckEventId: bigint | null;
  readonly skipEventId: bigint | null;
  readonly lastError: string | null;
  readonly rearmCount: number;
  readonly progressed: boolean;
  readonly gapsUnfenced: number;
  readonly gapWatch: readonly bigint[];
  readonly gapsRecheck: boolean;
  readonly start: bigint | 'done' | 'unchanged';
  /** More is waiting right now (the fetch was cut by LIMIT or the turn ran out of time). */
  readonly hasMore: boolean;
  /** The fetch was cut by LIMIT and everything it returned was resolved: a larger batch would help. */
  readonly filledBatch: boolean;
  /** The crash record stays, still isolating up to here; null: it goes with the commit. */
  readonly keepIsolating: bigint | null;
}

/**
 * The row after a turn (docs/design.md §4.3 and §4.4): the cursor and ranges
 * of the settlement; on a failure the attempts on the failing event, its id and error; the re-arm
 * budget restored when the cursor advanced; the gap watch of the ranges still pending.
 */
export function closeTurn(
  held: HeldState,
  opening: Extract<Opening, { kind: 'open' }>,
  turn: {
    readonly input: TurnInput;
    readonly deliverable: readonly bigint[];
    readonly plan: DeliveryPlan;
    readonly settlement: Settlement;
    readonly delivered: Delivered;
    readonly head: bigint;
    /** Pending ranges once the settlement's changes are written. */
    readonly pendingRanges: number;
  },
): TurnClose {
  const { state } = opening;
  const { input, settlement, delivered, plan } = turn;
  const fetch: FetchResult = input.fetch;
  const cursor = input.cursor;
  // Looked up at most twice: no set of the batch's ids (a lane's holds mostly other lanes' ids).
  const resolved = { has: (id: bigint) => delivered.resolvedIds.includes(id) };
  const failure = delivered.failure;
  const attempts = failure
    ? failure.attempts
    : state.stuckEventId !== null && !resolved.has(state.stuckEventId)
      ? state.attempts
      : 0;
  const maxFence = [held.maxFence ?? 0n, ...settlement.ranges.map((r) => r.fence ?? 0n)].reduce(max, 0n);
  // A strict consumer that delivered all it could and stopped at a hole that cannot resolve yet
  // has no more to do now, however far the head is: its gap watch wakes it (docs/design.md §4.1).
  // Cannot resolve yet: fenced, and a transaction below the fence still runs (one that could
  // commit into it). A hole not fenced yet, or whose writers have all ended, takes the next turn at
  // once: it fences the one, burns the other. So does a LIMIT-cut fetch that delivered something.
  const blocking = settlement.ranges.find((r) => r.from === settlement.cursor + 1n);
  const waitsAtHole =
    input.ordering === 'strict' &&
    plan.ids.length === turn.deliverable.length &&
    delivered.resolvedIds.length === plan.ids.length &&
    (fetch.complete || turn.deliverable.length === 0) &&
    !settlement.needsRecheck &&
    blocking !== undefined &&
    blocking.fence !== null &&
    runningBelow(held.snapshot, blocking.fence).some((xid) => xid !== held.xid);
  const hasMore =
    !waitsAtHole &&
    (!fetch.complete || delivered.resolvedIds.length < plan.ids.length || settlement.cursor < turn.head);
  return {
    cursor: settlement.cursor,
    status: delivered.dead ? 'dead' : hasMore ? 'processing' : 'idle',
    attempts,
    stuckEventId: failure ? failure.eventId : attempts > 0 ? state.stuckEventId : null,
    skipEventId: state.skipEventId !== null && !resolved.has(state.skipEventId) ? state.skipEventId : null,
    lastError: failure ? failure.message : null,
    rearmCount: settlement.cursor > cursor ? 0 : state.rearmCount,
    progressed: settlement.cursor > cursor || delivered.resolvedIds.length > 0,
    gapsUnfenced: settlement.ranges.filter((r) => r.fence === null).length,
    gapWatch: turn.pendingRanges > 0 && maxFence > 0n ? runningBelow(held.snapshot, maxFence) : [],
    gapsRecheck: settlement.needsRecheck,
    start: opening.stragglers
      ? settleStragglers(opening.stragglers, fetch, turn.deliverable, delivered.resolvedIds.length)
      : 'unchanged',
    hasMore: hasMore && !delivered.dead && !failure,
    // Only a turn that took the whole fetch says a larger batch would have helped: not one that
    // delivered a part of it (isolating a crash, or before a recorded failure: pinStuck).
    filledBatch:
      !fetch.complete &&
      !failure &&
      delivered.resolvedIds.length === plan.ids.length &&
      !plan.isolating &&
      plan.ids.length === turn.deliverable.length,
    keepIsolating:
      plan.isolating && plan.isolateUntil !== null && settlement.cursor < plan.isolateUntil
        ? plan.isolateUntil
        : null,
  };
}

function max(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}

// ---- the operator's transitions (docs/design.md §6.2) -------------------------------------------

export type OperatorAction = 'restart' | 'disable' | 'enable' | 'skip' | 'fence' | 'replay';

/** What an operator action writes on the consumer row; an absent field is left as it is. */
export interface RowChange {
  readonly status?: ConsumerStatus;
  readonly cursor?: bigint;
  /** attempts 0. */
  readonly resetAttempts?: boolean;
  /** No stuck event any more. */
  readonly clearStuck?: boolean;
  /** The automatic re-arm budget starts again. */
  readonly resetRearms?: boolean;
  /** The next turn resolves this event without the handler (undefined: unchanged). */
  readonly skipEventId?: bigint | null;
  /** last_error and its time and category go. */
  readonly clearError?: boolean;
  /** Every pending gap range goes (and the columns that summarise them). */
  readonly clearGaps?: boolean;
  /** Crash records (turn starts) go. */
  readonly clearTurnStarts?: boolean;
  /** A disable with its end (null: until enabled) and reason, or 'clear'. */
  readonly disabled?: { readonly until: Date | null; readonly reason: string | null } | 'clear';
  /** startFrom-'now' style in-flight events to deliver later (null: none). */
  readonly start?: InFlightAt | null;
}

/** A change of a consumer's lane count as a restart sees it. */
export interface LaneChangeFact {
  readonly consumer: string;
  readonly from: number;
  readonly to: number;
  readonly barrier: bigint;
  /** The new lanes exist; the old ones drain their pending gaps below the barrier. */
  readonly switched: boolean;
}

/** The events in flight at a snapshot: delivered once every transaction then running has ended. */
export interface InFlightAt {
  readonly snapshot: string;
  /** An xid allocated after the snapshot (docs/design.md §5.3). */
  readonly fence: bigint;
  /** The highest id visible to the snapshot. */
  readonly upto: bigint;
}

/** A transition's outcome: the row change, and what the action reports and audits. */
export interface OperatorChange {
  readonly action: OperatorAction;
  readonly row: RowChange;
  readonly cursorBefore: bigint;
  readonly cursorAfter: bigint;
  readonly statusBefore: ConsumerStatus;
  readonly statusAfter: ConsumerStatus;
  /** Recorded in the audit with the actor and reason. */
  readonly details: Readonly<Record<string, unknown>>;
}

function change(
  state: ConsumerState,
  action: OperatorAction,
  row: RowChange,
  details: Record<string, unknown> = {},
): OperatorChange {
  return {
    action,
    row,
    cursorBefore: state.cursor,
    cursorAfter: row.cursor ?? state.cursor,
    statusBefore: state.status,
    statusAfter: row.status ?? state.status,
    details,
  };
}

/**
 * Where "from the beginning" is: just below the retention floor, or below the oldest event kept
 * when one is under the floor (a transaction in flight at a prune committed it afterwards: the
 * prune could not see it). Ids below it are pruned, not holes to wait for.
 */
export function beginningPosition(floor: bigint, oldestKept: bigint | null): bigint {
  return oldestKept !== null && oldestKept < floor ? oldestKept - 1n : floor - 1n;
}

/** Where a restart puts the cursor: before every kept event, the log head, or after a given id. */
export type RestartFrom = 'beginning' | 'now' | bigint;

/**
 * Restart: the cursor moves (before every kept event, to the head, or to an id between them) and
 * everything about the old position goes: attempts, stuck and skipped events, errors,
 * pending gaps, crash records and the re-arm budget. A dead consumer becomes idle, a disabled one
 * stays disabled. 'now' keeps the events in flight at its snapshot, as a 'now' registration does;
 * 'beginning' those at or below its cursor.
 * @throws {BelowRetentionFloorError} @throws {BeyondHeadError}
 */
export function restartConsumer(
  state: ConsumerState,
  from: RestartFrom,
  facts: {
    readonly floor: bigint;
    readonly head: bigint;
    /** The lowest id of the events kept (null: none). */
    readonly oldestKept?: bigint | null;
    readonly inFlight: InFlightAt | null;
    readonly laneChange?: LaneChangeFact | null;
  },
): OperatorChange {
  let cursor: bigint;
  // 'beginning' starts before every kept event: below the retention floor, unless an event a
  // transaction in flight at a prune committed below it afterwards (the prune could not see it) is
  // kept there; and the events in flight at the restart's snapshot at or below it are its
  // stragglers (docs/design.md §6.3).
  if (from === 'beginning') cursor = beginningPosition(facts.floor, facts.oldestKept ?? null);
  else if (from === 'now') cursor = facts.head;
  else {
    if (from < facts.floor - 1n) throw new BelowRetentionFloorError(from, facts.floor);
    if (from > facts.head) throw new BeyondHeadError(from, facts.head);
    cursor = from;
  }
  // Once a change of lanes has switched (docs/design.md §11.3), the barrier splits the log between
  // the old lanes and the new ones: a restart would have both deliver the events below it (each by
  // its own hash: twice, out of order per key). Before the switch only old lanes exist, and one
  // restarted past the barrier raises it, as a turn that ended past it does.
  const lanes = facts.laneChange;
  if (lanes?.switched) throw new LaneChangeInProgressError(lanes.consumer, lanes.from, lanes.to);
  return change(
    state,
    'restart',
    {
      cursor,
      status: state.status === 'disabled' ? 'disabled' : 'idle',
      resetAttempts: true,
      clearStuck: true,
      resetRearms: true,
      skipEventId: null,
      clearError: true,
      clearGaps: true,
      clearTurnStarts: true,
      start:
        from === 'now'
          ? facts.inFlight
          : from === 'beginning' && facts.inFlight !== null && cursor > 0n
            ? { ...facts.inFlight, upto: cursor }
            : null,
    },
    { from: typeof from === 'bigint' ? from.toString() : from, statusBefore: state.status },
  );
}

/** Disable: no turn runs until enabled, or until `until` (the database's time) has passed. */
export function disableConsumer(
  state: ConsumerState,
  until: Date | null,
  reason: string | null,
): OperatorChange {
  return change(
    state,
    'disable',
    { status: 'disabled', disabled: { until, reason } },
    { until: until?.toISOString() ?? null, statusBefore: state.status },
  );
}

/**
 * Enable: a disabled consumer runs again; on a dead one it is a manual re-arm (attempts and the
 * re-arm budget start again). Either way a disable's end and reason go.
 */
export function enableConsumer(state: ConsumerState): OperatorChange {
  const dead = state.status === 'dead';
  return change(
    state,
    'enable',
    {
      status: state.status === 'disabled' || dead ? 'idle' : state.status,
      disabled: 'clear',
      ...(dead ? { resetAttempts: true, resetRearms: true } : {}),
    },
    { statusBefore: state.status },
  );
}

/** The event a consumer is stuck on: it failed on it (or died of it) and has not delivered it. */
export function stuckEventOf(state: ConsumerState): bigint | null {
  return state.stuckEventId !== null && (state.attempts > 0 || state.status === 'dead')
    ? state.stuckEventId
    : null;
}

/**
 * The highest event the row still has to resolve itself: the one it is stuck on, or an operator's
 * skip of it. An old lane of a change of lane count reads up to it even above the barrier (see
 * fetchFilterOf): standing at the barrier, it could neither retry nor skip it, and the change,
 * which waits for every old lane to be free of both, would never switch.
 */
export function unresolvedEventOf(state: ConsumerState): bigint | null {
  const stuck = stuckEventOf(state);
  const skip = state.skipEventId;
  if (stuck === null) return skip;
  return skip !== null && skip > stuck ? skip : stuck;
}

/**
 * Skip: only the event the consumer is stuck on (compare-and-set), which its next turn resolves
 * without calling the handler; a dead consumer becomes idle with a fresh re-arm budget. The event
 * is copied into the dead letters by the caller.
 * @throws {SkipMismatchError}
 */
export function skipEvent(name: string, state: ConsumerState, eventId: bigint): OperatorChange {
  const stuck = stuckEventOf(state);
  if (stuck !== eventId) throw new SkipMismatchError(name, eventId, stuck);
  return change(
    state,
    'skip',
    {
      status: state.status === 'dead' ? 'idle' : state.status,
      skipEventId: eventId,
      resetAttempts: true,
      clearStuck: true,
      resetRearms: true,
      clearTurnStarts: true,
    },
    { eventId: eventId.toString(), lastError: state.lastError, attempts: state.attempts },
  );
}

/**
 * Fence: gives up on one id of a pending gap range for good; the caller inserts a tombstone with
 * that id. The consumer's row is not changed (every consumer waiting on the id is asked to look
 * again by the caller).
 * @throws {NotAGapError} when no pending range of the consumer holds the id
 */
export function fenceGap(
  name: string,
  state: ConsumerState,
  eventId: bigint,
  inPendingRange: boolean,
): OperatorChange {
  if (!inPendingRange) throw new NotAGapError(name, eventId, 'no pending range of the consumer contains it');
  return change(state, 'fence', {}, { eventId: eventId.toString() });
}

/** Replay: the dead letters `ids` are delivered again by the next turn; the row is not changed. */
export function replayDeadLetters(state: ConsumerState, ids: readonly bigint[]): OperatorChange {
  return change(state, 'replay', {}, { deadLetterIds: ids.map(String) });
}

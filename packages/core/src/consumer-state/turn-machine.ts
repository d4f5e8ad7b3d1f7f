// The consumer's state machine, as one turn goes through it (docs/design.md §4.3). Pure:
// given the row as read once it is held and what the turn observed, it decides whether the turn
// runs, which ranges it re-fetches, what it delivers, and what the row becomes. dispatcher/turn.ts
// only reads, calls these, and writes what they return.
import { rearmDecision } from '../dispatcher/rearm.js';
import {
  type FetchResult,
  type GapRange,
  type Ordering,
  type Settlement,
  type TurnInput,
  settleStragglers,
  lowestEnded,
  runningBelow,
  type Snapshot,
} from '../gaps/gaps.js';
import {
  isWaitingToRetry,
  type ConsumerState,
  type CrashMarker,
  type HeldState,
  type StartInFlight,
} from './consumer-state.js';

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

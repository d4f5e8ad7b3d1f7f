// The operator's transitions of a consumer (docs/design.md §6.2), as the turn's are in
// turn-machine.ts: pure functions of the row as read once the operator holds it (and of the facts
// the action read then), which decide what the row becomes or refuse with a typed error.
// queries/operator.ts carries out what they return; @sluice/admin validates input and calls both.
import {
  BelowRetentionFloorError,
  BeyondHeadError,
  LaneChangeInProgressError,
  NotAGapError,
  SkipMismatchError,
} from '../errors.js';
import type { ConsumerState, ConsumerStatus } from './consumer-state.js';

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

/** Where a restart puts the cursor: the oldest kept event, the log head, or after a given id. */
export type RestartFrom = 'beginning' | 'now' | bigint;

/**
 * Restart: the cursor moves (to just below the retention floor, to the head, or to an id between
 * them) and everything about the old position goes: attempts, stuck and skipped events, errors,
 * pending gaps, crash records and the re-arm budget. A dead consumer becomes idle, a disabled one
 * stays disabled. 'now' keeps the events in flight at its snapshot, as a 'now' registration does.
 * @throws {BelowRetentionFloorError} @throws {BeyondHeadError}
 */
export function restartConsumer(
  state: ConsumerState,
  from: RestartFrom,
  facts: {
    readonly floor: bigint;
    readonly head: bigint;
    readonly inFlight: InFlightAt | null;
    readonly laneChange?: LaneChangeFact | null;
  },
): OperatorChange {
  let cursor: bigint;
  if (from === 'beginning') cursor = facts.floor - 1n;
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
      start: from === 'now' ? facts.inFlight : null,
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

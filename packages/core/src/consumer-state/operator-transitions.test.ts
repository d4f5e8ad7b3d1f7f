// The operator's transitions at the unit tier (docs/design.md §6.2): each rule, then properties over
// generated rows (what each action refuses, what it never changes), then a skip followed by the
// turn machine: the next turn runs and resolves the skipped event without the handler.
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import {
  BelowRetentionFloorError,
  BeyondHeadError,
  LaneChangeInProgressError,
  NotAGapError,
  SkipMismatchError,
} from '../errors.js';
import {
  type ConsumerState,
  disableConsumer,
  enableConsumer,
  fenceGap,
  openTurn,
  type OperatorChange,
  planDelivery,
  replayDeadLetters,
  restartConsumer,
  type RestartFrom,
  type RowChange,
  skipEvent,
  stuckEventOf,
  unresolvedEventOf,
} from './consumer-state.js';
import { held, idleState, RULES, stateArbitrary } from './generated-states.test-support.js';

/** The row as queries/operator.ts applyOperatorChange leaves it (the model of that statement). */
function applied(state: ConsumerState, row: RowChange): ConsumerState {
  const disabled = row.disabled === 'clear' ? { until: null } : row.disabled;
  return {
    ...state,
    status: row.status ?? state.status,
    cursor: row.cursor ?? state.cursor,
    attempts: row.resetAttempts ? 0 : state.attempts,
    stuckEventId: row.clearStuck ? null : state.stuckEventId,
    rearmCount: row.resetRearms ? 0 : state.rearmCount,
    skipEventId: row.skipEventId === undefined ? state.skipEventId : row.skipEventId,
    lastError: row.clearError ? null : state.lastError,
    lastErrorAt: row.clearError ? null : state.lastErrorAt,
    gapCount: row.clearGaps ? 0 : state.gapCount,
    gapsUnfenced: row.clearGaps ? 0 : state.gapsUnfenced,
    gapsRecheck: row.clearGaps ? false : state.gapsRecheck,
    gapWatch: row.clearGaps ? [] : state.gapWatch,
    disabledUntil: disabled === undefined ? state.disabledUntil : disabled.until,
    start:
      row.start === undefined
        ? state.start
        : row.start && {
            snapshot: row.start.snapshot,
            fence: row.start.fence,
            upto: row.start.upto,
            after: 0n,
          },
  };
}

const fromArbitrary: fc.Arbitrary<RestartFrom> = fc.oneof(
  fc.constant('beginning' as const),
  fc.constant('now' as const),
  fc.bigInt({ min: 0n, max: 60n }),
);

describe('restart', () => {
  const facts = { floor: 5n, head: 40n, inFlight: null };

  test('beginning is just below the retention floor (or below a kept event under it), now is the head, an id is that id', () => {
    const state = idleState({ cursor: 20n });
    expect(restartConsumer(state, 'beginning', facts).cursorAfter).toBe(4n);
    expect(restartConsumer(state, 'beginning', { ...facts, oldestKept: 9n }).cursorAfter).toBe(4n);
    // An event a transaction in flight at a prune committed below the floor afterwards.
    expect(restartConsumer(state, 'beginning', { ...facts, oldestKept: 2n }).cursorAfter).toBe(1n);
    expect(restartConsumer(state, 'now', facts).cursorAfter).toBe(40n);
    expect(restartConsumer(state, 12n, facts).cursorAfter).toBe(12n);
    expect(() => restartConsumer(state, 3n, facts)).toThrow(BelowRetentionFloorError);
    expect(() => restartConsumer(state, 41n, facts)).toThrow(BeyondHeadError);
  });

  test("'now' keeps the events in flight at its snapshot, 'beginning' those at or below its cursor; an id keeps none", () => {
    const inFlight = { snapshot: '90:95:91', fence: 96n, upto: 40n };
    const state = idleState({ start: { snapshot: '1:2:', fence: 3n, upto: 1n, after: 0n } });
    expect(restartConsumer(state, 'now', { ...facts, inFlight }).row.start).toEqual(inFlight);
    expect(restartConsumer(state, 'beginning', { ...facts, inFlight }).row.start).toEqual({
      ...inFlight,
      upto: 4n,
    });
    expect(restartConsumer(state, 'beginning', { ...facts, floor: 1n, inFlight }).row.start).toBeNull();
    expect(restartConsumer(state, 12n, { ...facts, inFlight }).row.start).toBeNull();
    expect(restartConsumer(state, 'now', facts).row.start).toBeNull();
  });

  test('properties: the cursor lands between the floor (or a kept event below it) and the head, its stragglers at or below it, and nothing of the old position survives', () => {
    fc.assert(
      fc.property(
        stateArbitrary,
        fromArbitrary,
        fc.bigInt({ min: 1n, max: 30n }),
        fc.bigInt({ min: 0n, max: 60n }),
        fc.option(fc.bigInt({ min: 1n, max: 90n })),
        fc.boolean(),
        (state, from, floor, headAbove, kept, inFlightThen) => {
          const head = floor - 1n + headAbove;
          // The oldest kept event: above the floor, or below it (a late commit), never above the head.
          const oldestKept = kept !== null && kept <= head ? kept : null;
          const inFlight = inFlightThen ? { snapshot: '90:95:91', fence: 96n, upto: head } : null;
          let restarted: OperatorChange;
          try {
            restarted = restartConsumer(state, from, { floor, head, oldestKept, inFlight });
          } catch {
            // Only an id outside [floor - 1, head] is refused.
            expect(typeof from).toBe('bigint');
            expect((from as bigint) < floor - 1n || (from as bigint) > head).toBe(true);
            return;
          }
          const after = applied(state, restarted.row);
          const lowest = oldestKept !== null && oldestKept - 1n < floor - 1n ? oldestKept - 1n : floor - 1n;
          expect(after.cursor >= lowest && after.cursor <= head).toBe(true);
          if (from === 'beginning') {
            expect(after.cursor).toBe(lowest);
            expect(restarted.row.start ?? null).toEqual(
              inFlight !== null && lowest > 0n ? { ...inFlight, upto: lowest } : null,
            );
          }
          expect(after.status).toBe(state.status === 'disabled' ? 'disabled' : 'idle');
          expect(after).toMatchObject({
            attempts: 0,
            stuckEventId: null,
            skipEventId: null,
            rearmCount: 0,
            lastError: null,
            gapCount: 0,
            gapsRecheck: false,
          });
          expect(restarted.row.clearTurnStarts).toBe(true);
          expect(restarted).toMatchObject({ cursorBefore: state.cursor, statusBefore: state.status });
        },
      ),
    );
  });
});

test('properties: during a change of lanes a restart never moves a row once it has switched; before, it may go anywhere', () => {
  fc.assert(
    fc.property(
      stateArbitrary,
      fromArbitrary,
      fc.bigInt({ min: 0n, max: 60n }),
      fc.boolean(),
      (state, from, barrier, switched) => {
        const laneChange = { consumer: 'c', from: 2, to: 4, barrier, switched };
        const facts = { floor: 1n, head: 60n, inFlight: null, laneChange };
        let unrestricted: OperatorChange;
        try {
          unrestricted = restartConsumer(state, from, { ...facts, laneChange: null });
        } catch {
          return; // outside [floor - 1, head]: refused either way
        }
        if (switched) {
          expect(() => restartConsumer(state, from, facts)).toThrow(LaneChangeInProgressError);
        } else {
          expect(restartConsumer(state, from, facts)).toEqual(unrestricted);
        }
      },
    ),
  );
});

describe('skip', () => {
  test('only the event the consumer is stuck on, which the next turn resolves without the handler', () => {
    const dead = idleState({ status: 'dead', cursor: 9n, attempts: 3, stuckEventId: 10n, lastError: 'boom' });
    expect(() => skipEvent('c', dead, 11n)).toThrow(SkipMismatchError);
    expect(() => skipEvent('c', idleState({ stuckEventId: 10n }), 10n)).toThrow(SkipMismatchError); // no attempt
    const skipped = skipEvent('c', dead, 10n);
    expect(skipped.details).toMatchObject({ eventId: '10', lastError: 'boom', attempts: 3 });
    const after = applied(dead, skipped.row);
    expect(after).toMatchObject({ status: 'idle', skipEventId: 10n, attempts: 0, stuckEventId: null });

    const turn = held(after, { rowXmin: 1n });
    const opening = openTurn(turn, 'cluster-a', RULES);
    expect(opening.kind).toBe('open');
    if (opening.kind !== 'open') return;
    const plan = planDelivery(
      turn,
      opening.state,
      false,
      [10n, 11n],
      (id) => id === after.skipEventId,
      RULES,
    );
    expect(plan).toMatchObject({ ids: [10n, 11n], crashedOut: false });
  });

  test('properties: accepted exactly for the stuck event; the cursor never moves', () => {
    fc.assert(
      fc.property(stateArbitrary, fc.bigInt({ min: 0n, max: 60n }), (state, eventId) => {
        const stuck = stuckEventOf(state);
        if (stuck !== eventId) {
          expect(() => skipEvent('c', state, eventId)).toThrow(SkipMismatchError);
          return;
        }
        const skipped = skipEvent('c', state, eventId);
        const after = applied(state, skipped.row);
        expect(after.cursor).toBe(state.cursor);
        expect(after.skipEventId).toBe(eventId);
        expect(after.status).toBe(state.status === 'dead' ? 'idle' : state.status);
        expect(after.attempts).toBe(0);
      }),
    );
  });

  test('properties: the event a row still has to resolve is its stuck event, then its skip; an old lane reads up to it past its barrier', () => {
    fc.assert(
      fc.property(stateArbitrary, (state) => {
        const stuck = stuckEventOf(state);
        const unresolved = unresolvedEventOf(state);
        for (const id of [stuck, state.skipEventId]) {
          if (id !== null) expect(unresolved !== null && unresolved >= id).toBe(true);
        }
        if (stuck === null && state.skipEventId === null) expect(unresolved).toBeNull();
        if (stuck !== null)
          expect(unresolvedEventOf(applied(state, skipEvent('c', state, stuck).row))).toBe(stuck);
      }),
    );
  });
});

describe('disable and enable', () => {
  test('properties: disable stops the consumer where it is; enable undoes a disable and re-arms a dead one', () => {
    fc.assert(
      fc.property(
        stateArbitrary,
        fc.option(fc.date({ noInvalidDate: true }), { nil: null }),
        (state, until) => {
          const disabled = applied(state, disableConsumer(state, until, 'maintenance').row);
          expect(disabled).toMatchObject({ status: 'disabled', cursor: state.cursor, disabledUntil: until });
          expect(disabled.attempts).toBe(state.attempts);

          const enabled = enableConsumer(state);
          const after = applied(state, enabled.row);
          expect(after.cursor).toBe(state.cursor);
          expect(after.disabledUntil).toBeNull();
          if (state.status === 'dead')
            expect(after).toMatchObject({ status: 'idle', attempts: 0, rearmCount: 0 });
          else if (state.status === 'disabled')
            expect(after).toMatchObject({ status: 'idle', attempts: state.attempts });
          else
            expect(after).toMatchObject({
              status: state.status,
              attempts: state.attempts,
              rearmCount: state.rearmCount,
            });
          // Enabling what was disabled gives back the consumer as it was, but for the disable, and
          // idle (a dead one too: disabling it ended its death, not its attempts).
          const roundTrip = applied(disabled, enableConsumer(disabled).row);
          expect(roundTrip).toEqual({
            ...state,
            status: 'idle',
            disabledUntil: null,
          });
        },
      ),
    );
  });
});

describe('fence and replay', () => {
  test('fence refuses an id outside the pending ranges; neither changes the row', () => {
    const state = idleState({ cursor: 8n, gapCount: 1 });
    expect(() => fenceGap('c', state, 5n, false)).toThrow(NotAGapError);
    expect(fenceGap('c', state, 5n, true)).toMatchObject({
      row: {},
      cursorAfter: 8n,
      details: { eventId: '5' },
    });
    expect(replayDeadLetters(state, [3n, 4n])).toMatchObject({
      row: {},
      details: { deadLetterIds: ['3', '4'] },
    });
  });
});

test('property: only a restart moves a cursor (docs/design.md §9, I4)', () => {
  fc.assert(
    fc.property(stateArbitrary, fc.bigInt({ min: 0n, max: 60n }), (state, id) => {
      const changes: OperatorChange[] = [
        disableConsumer(state, null, null),
        enableConsumer(state),
        fenceGap('c', state, id, true),
        replayDeadLetters(state, [id]),
        ...(stuckEventOf(state) === id ? [skipEvent('c', state, id)] : []),
      ];
      for (const change of changes) {
        expect(change.row.cursor).toBeUndefined();
        expect(change.cursorAfter).toBe(state.cursor);
      }
    }),
  );
});

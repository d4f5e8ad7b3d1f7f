// The turn machine at the unit tier: each decision against its rule, with properties over
// generated rows, then whole consumers walked turn after turn through openTurn → planDelivery →
// closeTurn with the real gap settlement, checking what a consumer promises: docs/design.md §4.3
// to docs/design.md §4.7, and docs/design.md §6.1 for re-arm.
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { deliverableIds, settleTurn, type GapRange, type TurnInput } from '../gaps/gaps.js';
import {
  choiceOvertaken,
  closeTurn,
  type ConsumerState,
  type CrashMarker,
  type Delivered,
  type DeliveryPlan,
  fenced,
  type FetchChoice,
  hasNothingToRecord,
  type Opening,
  openTurn,
  planDelivery,
  type TurnRules,
} from './consumer-state.js';
import { ago, held, idleState, NOW, RULES, stateArbitrary } from './generated-states.test-support.js';

const open = (opening: Opening) => {
  if (opening.kind !== 'open') throw new Error(`expected an open turn, got ${opening.reason}`);
  return opening;
};

// ---- openTurn ----------------------------------------------------------------------------

describe('openTurn', () => {
  test('a disabled consumer waits until its time-boxed disable ends, then is re-enabled', () => {
    expect(openTurn(held(idleState({ status: 'disabled' })), 'cluster-a', RULES)).toMatchObject({
      kind: 'skip',
      reason: 'disabled',
    });
    expect(
      openTurn(held(idleState({ status: 'disabled', disabledUntil: ago(-1) })), 'cluster-a', RULES),
    ).toMatchObject({ kind: 'skip', reason: 'disabled' });
    const ended = open(
      openTurn(held(idleState({ status: 'disabled', disabledUntil: ago(0) })), 'cluster-a', RULES),
    );
    expect(ended.change).toBe('reenabled');
    expect(ended.state).toMatchObject({ status: 'idle', disabledUntil: null });
  });

  test('a dead consumer re-arms after its cooldown, within its budget, with fresh attempts', () => {
    const dead = idleState({ status: 'dead', attempts: 3, stuckEventId: 1n, rearmCount: 1 });
    expect(openTurn(held({ ...dead, updatedAt: ago(59_999) }), 'cluster-a', RULES)).toMatchObject({
      kind: 'skip',
      reason: 'dead',
      rearmExhausted: false,
    });
    const rearmed = open(openTurn(held({ ...dead, updatedAt: ago(60_000) }), 'cluster-a', RULES));
    expect(rearmed.change).toBe('rearmed');
    expect(rearmed.state).toMatchObject({ status: 'idle', attempts: 0, rearmCount: 2 });
    expect(
      openTurn(held({ ...dead, rearmCount: 3, updatedAt: ago(3_600_000) }), 'cluster-a', RULES),
    ).toMatchObject({ kind: 'skip', reason: 'dead', rearmExhausted: true });
  });

  test('a failed event waits out its retry delay unless an operator skipped it', () => {
    const failed = idleState({ attempts: 1, stuckEventId: 1n, lastErrorAt: ago(500) });
    expect(openTurn(held(failed), 'cluster-a', RULES)).toMatchObject({ kind: 'skip', reason: 'retry-later' });
    expect(openTurn(held({ ...failed, skipEventId: 1n }), 'cluster-a', RULES).kind).toBe('open');
    expect(openTurn(held({ ...failed, lastErrorAt: ago(1_000) }), 'cluster-a', RULES).kind).toBe('open');
  });

  test('properties: what it skips, what it re-fetches, and what it never changes', () => {
    fc.assert(
      fc.property(
        stateArbitrary,
        fc.constantFrom<'fast' | 'strict'>('fast', 'strict'),
        fc.bigInt({ min: 800n, max: 1_100n }),
        (state, ordering, xmin) => {
          const rules = { ...RULES, ordering };
          const h = held(state, { snapshot: { xmin, xmax: xmin + 10n, xip: [] } });
          const opening = openTurn(h, 'cluster-a', rules);
          if (opening.kind === 'skip') {
            // Only these three rows wait; everything else runs.
            const disabled = state.status === 'disabled';
            const dead = state.status === 'dead';
            const retrying = !disabled && !dead && state.attempts > 0;
            expect(disabled || dead || retrying).toBe(true);
            if (opening.reason === 'retry-later') expect(state.skipEventId).toBeNull();
            return;
          }
          const next = opening.state;
          // The cursor, the gaps and the skip never change at the opening.
          expect(next.cursor).toBe(state.cursor);
          expect(next.gapCount).toBe(state.gapCount);
          expect(next.skipEventId).toBe(state.skipEventId);
          expect(['idle', 'processing']).toContain(next.status);
          expect(opening.change === 'rearmed').toBe(state.status === 'dead');
          expect(opening.change === 'reenabled').toBe(state.status === 'disabled');
          // Ranges are re-fetched when there are any, or when the fences came from another cluster;
          // all of them when strict, flagged, or after a cluster change.
          const clusterChanged = state.systemIdentifier !== 'cluster-a';
          expect(opening.clusterChanged).toBe(clusterChanged);
          expect(opening.recheck !== null).toBe(state.gapCount > 0 || clusterChanged);
          if (opening.recheck) {
            expect(opening.recheck.all).toBe(state.gapsRecheck || clusterChanged || ordering === 'strict');
            expect(opening.recheck.xmin).toBe(xmin);
          }
          // Stragglers are due once every transaction in flight at registration has ended.
          expect(opening.stragglers !== undefined).toBe(state.start !== null && xmin > state.start.fence);
        },
      ),
    );
  });
});

// ---- choiceOvertaken -----------------------------------------------------------------------

describe('choiceOvertaken', () => {
  // A range is re-fetched when unfenced, burnable, or fenced above the lowest ended watched xid
  // (queries/gaps.ts, selectRangesToRecheck).
  const chooses = (choice: FetchChoice, fence: bigint) => {
    const r = choice.recheck;
    return r !== null && (r.all || fence < r.xmin || (r.lowestEnded !== null && fence > r.lowestEnded));
  };
  const watching = idleState({ gapCount: 1, gapWatch: [950n, 970n] });
  const fromRow = (snapshot: { xmin: bigint; xmax: bigint; xip: bigint[] }) =>
    open(openTurn(held(watching, { snapshot }), 'cluster-a', RULES));

  test('a fetch whose snapshot saw a watched writer end chooses again, taking in its ranges', () => {
    const opened = fromRow({ xmin: 950n, xmax: 1_000n, xip: [950n, 970n] });
    expect(opened.recheck).toEqual({ all: false, xmin: 950n, lowestEnded: null });
    expect(chooses(opened, 980n)).toBe(false);
    // The same snapshot, or one where both still run: the choice stands.
    expect(
      choiceOvertaken(watching, opened, [{ xmin: 950n, xmax: 1_000n, xip: [950n, 970n] }]),
    ).toBeUndefined();
    const again = choiceOvertaken(watching, opened, [{ xmin: 950n, xmax: 1_010n, xip: [950n] }]);
    expect(again?.recheck).toEqual({ all: false, xmin: 950n, lowestEnded: 970n });
    expect(again && chooses(again, 980n)).toBe(true);
    // Chosen by that snapshot, the same fetch snapshot overtakes nothing more.
    expect(
      again && choiceOvertaken(watching, again, [{ xmin: 950n, xmax: 1_010n, xip: [950n] }]),
    ).toBeUndefined();
  });

  test('a choice of every range stands; stragglers that came due are taken in', () => {
    const strict = open(
      openTurn(held(watching, { snapshot: { xmin: 950n, xmax: 1_000n, xip: [950n, 970n] } }), 'cluster-a', {
        ...RULES,
        ordering: 'strict',
      }),
    );
    expect(choiceOvertaken(watching, strict, [{ xmin: 1_001n, xmax: 1_001n, xip: [] }])).toBeUndefined();
    const start = { snapshot: '940:960:940', fence: 960n, upto: 5n, after: 0n };
    const registering = idleState({ start });
    const early = open(
      openTurn(
        held(registering, { snapshot: { xmin: 940n, xmax: 1_000n, xip: [940n] } }),
        'cluster-a',
        RULES,
      ),
    );
    expect(early.stragglers).toBeUndefined();
    expect(choiceOvertaken(registering, early, [{ xmin: 961n, xmax: 1_000n, xip: [] }])).toEqual({
      recheck: null,
      stragglers: start,
    });
  });

  test('property: the choice made again re-fetches every range the first did, and is a fixed point for those snapshots', () => {
    const xid = fc.bigInt({ min: 900n, max: 1_100n });
    const snapshot = fc
      .tuple(xid, fc.bigInt({ min: 0n, max: 100n }), fc.array(xid, { maxLength: 6 }))
      .map(([xmin, width, running]) => {
        const xmax = xmin + width;
        const xip = [...new Set([xmin, ...running.filter((x) => x > xmin && x < xmax)])].sort((a, b) =>
          a < b ? -1 : 1,
        );
        return { xmin, xmax, xip: width === 0n ? [] : xip };
      });
    fc.assert(
      fc.property(
        fc.array(xid, { maxLength: 5 }),
        snapshot,
        fc.array(snapshot, { minLength: 1, maxLength: 3 }),
        fc.array(xid, { maxLength: 8 }),
        (watch, rowSnapshot, fetched, fences) => {
          const state = idleState({ gapCount: 1, gapWatch: watch });
          const first = open(openTurn(held(state, { snapshot: rowSnapshot }), 'cluster-a', RULES));
          const again = choiceOvertaken(state, first, fetched);
          const final = again ?? first;
          for (const fence of fences) if (chooses(first, fence)) expect(chooses(final, fence)).toBe(true);
          expect(choiceOvertaken(state, final, fetched)).toBeUndefined();
          // Every watched xid one of the fetch's snapshots saw ended is taken in.
          for (const s of fetched) {
            for (const w of watch) {
              const ended = !(w >= s.xmin && (w >= s.xmax || s.xip.includes(w)));
              if (ended) expect(final.recheck?.lowestEnded ?? Infinity).not.toBeGreaterThan(w);
            }
          }
        },
      ),
    );
  });
});

// ---- fenced, hasNothingToRecord ------------------------------------------------------------

describe('fenced', () => {
  test('gives every unfenced range the turn xid and leaves fenced ones alone', () => {
    const ranges = fc.array(
      fc.record({
        from: fc.bigInt({ min: 1n, max: 100n }),
        width: fc.bigInt({ min: 0n, max: 5n }),
        fence: fc.option(fc.bigInt({ min: 1n, max: 999n }), { nil: null }),
      }),
    );
    fc.assert(
      fc.property(ranges, fc.bigInt({ min: 1_000n, max: 2_000n }), (generated, xid) => {
        const input: GapRange[] = generated.map((g) => ({
          from: g.from,
          to: g.from + g.width,
          fence: g.fence,
        }));
        const out = fenced(input, xid);
        expect(out).toHaveLength(input.length);
        out.forEach((range, i) => {
          const before = input[i] as GapRange;
          expect(range.from).toBe(before.from);
          expect(range.to).toBe(before.to);
          expect(range.fence).toBe(before.fence ?? xid);
        });
      }),
    );
  });
});

describe('hasNothingToRecord', () => {
  test('an idle shared consumer with nothing pending has nothing to write', () => {
    const h = held(idleState());
    expect(hasNothingToRecord(h, open(openTurn(h, 'cluster-a', RULES)), 'cluster-a', RULES, 0)).toBe(true);
  });

  test('any one thing to record makes the turn write', () => {
    const pending: [string, Partial<ConsumerState> | 'marker' | 'per-instance' | 'rechecked'][] = [
      ['processing', { status: 'processing' }],
      ['a gap', { gapCount: 1 }],
      ['a skip', { skipEventId: 1n }],
      ['a replay', { replaysPending: true }],
      ['a start', { start: { snapshot: '1:2:', fence: 5n, upto: 0n, after: 0n } }],
      ['a stuck event', { stuckEventId: 1n }],
      ['an unfenced gap', { gapsUnfenced: 1 }],
      ['a flagged recheck', { gapsRecheck: true }],
      ['another cluster', { systemIdentifier: 'cluster-b' }],
      ['a crash record', 'marker'],
      ['a per-instance row (its heartbeat)', 'per-instance'],
      ['re-fetched ranges', 'rechecked'],
    ];
    for (const [what, change] of pending) {
      const state = typeof change === 'object' ? idleState(change) : idleState();
      const marker: CrashMarker | null =
        change === 'marker' ? { first: 1n, last: 1n, started: 1, isolateUntil: null } : null;
      const rules = change === 'per-instance' ? { ...RULES, shared: false } : RULES;
      const h = held(state, { marker });
      const opening = open(openTurn(h, 'cluster-a', rules));
      expect(hasNothingToRecord(h, opening, 'cluster-a', rules, change === 'rechecked' ? 1 : 0), what).toBe(
        false,
      );
    }
  });
});

// ---- planDelivery -------------------------------------------------------------------------

const markerArbitrary: fc.Arbitrary<CrashMarker | null> = fc.option(
  fc
    .record({
      first: fc.bigInt({ min: 1n, max: 12n }),
      width: fc.bigInt({ min: 0n, max: 6n }),
      started: fc.integer({ min: 0, max: 4 }),
      isolate: fc.option(fc.bigInt({ min: 1n, max: 20n }), { nil: null }),
    })
    .map((g) => ({ first: g.first, last: g.first + g.width, started: g.started, isolateUntil: g.isolate })),
  { nil: null },
);

describe('planDelivery', () => {
  test('properties: a prefix of the deliverable ids, one at a time while isolating, crashes charged once', () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.bigInt({ min: 1n, max: 20n }), { maxLength: 8 }).map((ids) => ids.sort(cmp)),
        markerArbitrary,
        fc.boolean(),
        fc.integer({ min: 0, max: 4 }),
        fc.boolean(),
        (deliverable, marker, rearmed, attempts, skipped) => {
          const first = deliverable[0];
          const state = idleState({ attempts, stuckEventId: attempts > 0 ? (first ?? null) : null });
          const plan = planDelivery(
            held(state, { marker }),
            state,
            rearmed,
            deliverable,
            () => skipped,
            RULES,
          );
          expect(deliverable.slice(0, plan.ids.length)).toEqual(plan.ids);
          if (plan.isolating) expect(plan.ids.length).toBeLessThanOrEqual(1);
          else expect(plan.ids).toEqual(deliverable);
          if (marker === null) {
            expect(plan.isolating).toBe(false);
            expect(plan.crashes).toBe(0);
          }
          if (rearmed) expect(plan.crashes).toBe(0);
          expect(plan.resetStartCount).toBe(rearmed);
          // Prior attempts count only against the first event; any later one starts afresh.
          for (const id of deliverable.slice(1)) expect(plan.priorAttempts(id)).toBe(0);
          if (first !== undefined) {
            expect(plan.priorAttempts(first)).toBeGreaterThanOrEqual(attempts);
            expect(plan.priorAttempts(first)).toBeLessThanOrEqual(attempts + plan.crashes);
            // Only charged crashes end it unhandled: attempts the row counts get a call.
            const crashesCharged = plan.priorAttempts(first) > attempts;
            expect(plan.crashedOut).toBe(
              !skipped && crashesCharged && plan.priorAttempts(first) >= RULES.maxAttempts,
            );
          } else {
            expect(plan.crashedOut).toBe(false);
          }
        },
      ),
    );
  });

  test('properties: only the stuck event whose attempts a transactional timeout used up is spent', () => {
    fc.assert(
      fc.property(
        fc
          .uniqueArray(fc.bigInt({ min: 1n, max: 12n }), { minLength: 1, maxLength: 6 })
          .map((ids) => ids.sort(cmp)),
        fc.option(fc.bigInt({ min: 1n, max: 12n }), { nil: null }),
        fc.integer({ min: 0, max: 6 }),
        fc.option(fc.string({ maxLength: 8 }), { nil: null }),
        fc.constantFrom(null, 'handler', 'handler-timeout', 'connection'),
        fc.boolean(),
        (deliverable, stuckEventId, attempts, lastError, failureCategory, transactional) => {
          const rules = { ...RULES, transactional };
          const state = idleState({ attempts, stuckEventId, lastError, failureCategory });
          const plan = planDelivery(held(state), state, false, deliverable, () => false, rules);
          for (const id of deliverable) {
            const spent =
              transactional &&
              failureCategory === 'handler-timeout' &&
              id === stuckEventId &&
              attempts >= rules.maxAttempts;
            expect(plan.spent(id) !== undefined).toBe(spent);
            // The event's own last error, when the row kept one.
            if (spent && lastError !== null) expect(plan.spent(id)).toBe(lastError);
          }
        },
      ),
    );
  });

  test('properties: a transactional turn delivers the events before a recorded failure, or the failing event alone', () => {
    fc.assert(
      fc.property(
        fc
          .uniqueArray(fc.bigInt({ min: 1n, max: 12n }), { minLength: 1, maxLength: 6 })
          .map((ids) => ids.sort(cmp)),
        fc.option(fc.bigInt({ min: 1n, max: 12n }), { nil: null }),
        fc.boolean(),
        (deliverable, stuckEventId, transactional) => {
          const state = idleState({ attempts: stuckEventId === null ? 0 : 1, stuckEventId });
          const plan = planDelivery(held(state), state, false, deliverable, () => false, {
            ...RULES,
            transactional,
          });
          const at = stuckEventId === null ? -1 : deliverable.indexOf(stuckEventId);
          const expected =
            !transactional || at === -1
              ? deliverable
              : at === 0
                ? deliverable.slice(0, 1)
                : deliverable.slice(0, at);
          expect(plan.ids).toEqual(expected);
        },
      ),
    );
  });

  test('after a crash the batch is delivered one event per turn up to its last id', () => {
    const marker = { first: 5n, last: 8n, started: 1, isolateUntil: null };
    const state = idleState({ cursor: 4n });
    const plan = planDelivery(
      held(state, { marker }),
      state,
      false,
      [5n, 6n, 7n, 8n, 9n],
      () => false,
      RULES,
    );
    expect(plan).toMatchObject({ ids: [5n], isolating: true, isolateUntil: 8n, crashes: 1 });
    expect(plan.priorAttempts(5n)).toBe(1);
    // The next turn, past the crashed event: still one at a time, and the crash is not its doing.
    const later = planDelivery(
      held(idleState({ cursor: 5n }), { marker: { ...marker, started: 0, isolateUntil: 8n } }),
      idleState({ cursor: 5n }),
      false,
      [6n, 7n, 8n, 9n],
      () => false,
      RULES,
    );
    expect(later).toMatchObject({ ids: [6n], isolating: true, crashes: 0 });
  });

  test('a crash in a batch whose first event then went through is charged to the next event', () => {
    // The batch 5..8 crashed once; 5 alone was delivered and committed (the record still isolates
    // up to 8): the crash was not 5's doing, so it counts against 6, delivered alone.
    const marker = { first: 5n, last: 8n, started: 1, isolateUntil: 8n };
    const state = idleState({ cursor: 5n });
    const plan = planDelivery(held(state, { marker }), state, false, [6n, 7n, 8n], () => false, RULES);
    expect(plan).toMatchObject({ ids: [6n], isolating: true, crashes: 1 });
    expect(plan.priorAttempts(6n)).toBe(1);
    // Past the isolated range, batches are whole again and nothing is charged.
    const past = planDelivery(
      held(idleState({ cursor: 8n }), { marker }),
      idleState({ cursor: 8n }),
      false,
      [9n, 10n],
      () => false,
      RULES,
    );
    expect(past).toMatchObject({ ids: [9n, 10n], isolating: false });
    expect(past.priorAttempts(9n)).toBe(0);
  });
});

// ---- closeTurn ----------------------------------------------------------------------------

/** A turn over visible ids `log` (all committed), as the shell runs it, with `fail` deciding each handler call. */
function walkTurn(
  state: ConsumerState,
  log: readonly bigint[],
  fail: (id: bigint, attempt: number) => boolean,
  rules: TurnRules,
  limit: number,
  marker: CrashMarker | null = null,
) {
  const h = held(state, { marker });
  const opening = openTurn(h, 'cluster-a', rules);
  if (opening.kind === 'skip') return { opening, calls: [] as bigint[] };
  const next = opening.state;
  const above = log.filter((id) => id > next.cursor);
  const input: TurnInput = {
    cursor: next.cursor,
    rechecked: [],
    fetch: { ids: above.slice(0, limit), complete: above.length <= limit, xmin: h.snapshot.xmin },
    ordering: rules.ordering,
  };
  const deliverable = deliverableIds(input);
  const unhandled = (id: bigint) => id === next.skipEventId;
  const plan: DeliveryPlan = planDelivery(
    h,
    next,
    opening.change === 'rearmed',
    deliverable,
    unhandled,
    rules,
  );
  const calls: bigint[] = [];
  const resolvedIds: bigint[] = [];
  let failure: Delivered['failure'];
  let dead = false;
  if (plan.crashedOut) {
    const first = plan.ids[0] as bigint;
    if (rules.skipApplyErrors) resolvedIds.push(first);
    else {
      failure = { eventId: first, attempts: plan.priorAttempts(first), message: 'crashed out' };
      dead = true;
    }
  } else {
    for (const id of plan.ids) {
      if (unhandled(id)) {
        resolvedIds.push(id);
        continue;
      }
      const attempt = plan.priorAttempts(id) + 1;
      calls.push(id);
      if (!fail(id, attempt)) {
        resolvedIds.push(id);
        continue;
      }
      if (attempt >= rules.maxAttempts && rules.skipApplyErrors) {
        resolvedIds.push(id); // to the dead letters
        continue;
      }
      failure = { eventId: id, attempts: attempt, message: `failed ${id}` };
      dead = attempt >= rules.maxAttempts;
      break;
    }
  }
  const settlement = settleTurn(input, resolvedIds);
  const close = closeTurn(h, opening, {
    input,
    deliverable,
    plan,
    settlement,
    delivered: { resolvedIds, failure, dead },
    head: log[log.length - 1] ?? 0n,
    pendingRanges: settlement.ranges.length,
  });
  const after: ConsumerState = {
    ...next,
    cursor: close.cursor,
    status: close.status,
    attempts: close.attempts,
    stuckEventId: close.stuckEventId,
    skipEventId: close.skipEventId,
    lastError: close.lastError,
    // A failed turn stamps its error; the retry delay is then waited out in time (see below).
    lastErrorAt: failure ? NOW : next.lastErrorAt,
    rearmCount: close.rearmCount,
    updatedAt: NOW,
  };
  return { opening, calls, close, after, plan };
}

describe('closeTurn', () => {
  test('properties of one turn: cursor from the settlement, failure recorded, skip cleared once resolved', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 12 }),
        fc.option(fc.integer({ min: 1, max: 12 }), { nil: null }),
        fc.integer({ min: 0, max: 2 }),
        fc.integer({ min: 1, max: 12 }),
        fc.boolean(),
        fc.boolean(),
        fc.integer({ min: 0, max: 2 }),
        fc.boolean(),
        (cursor, poison, attempts, limit, skipApplyErrors, skipFirst, rearmCount, transactional) => {
          const rules = { ...RULES, skipApplyErrors, transactional };
          const log = Array.from({ length: 12 }, (_, i) => BigInt(i + 1));
          const first = BigInt(cursor + 1);
          const state = idleState({
            cursor: BigInt(cursor),
            attempts: attempts > 0 && cursor < 12 ? attempts : 0,
            stuckEventId: attempts > 0 && cursor < 12 ? first : null,
            lastError: attempts > 0 ? 'boom' : null,
            lastErrorAt: attempts > 0 ? ago(3_600_000) : null,
            skipEventId: skipFirst && cursor < 12 ? first : null,
            rearmCount,
          });
          const turn = walkTurn(state, log, (id) => poison !== null && id === BigInt(poison), rules, limit);
          if (!turn.close) throw new Error('the turn did not open');
          const { close, calls, after } = turn;
          // The cursor only moves forward, over what was resolved.
          expect(close.cursor).toBeGreaterThanOrEqual(state.cursor);
          expect(close.cursor - state.cursor).toBeLessThanOrEqual(BigInt(limit));
          // Handlers are called in id order, each at most once per turn.
          expect(calls).toEqual([...new Set(calls)].sort(cmp));
          // An operator's skip is resolved without the handler, and cleared once it is.
          if (state.skipEventId !== null) {
            expect(calls).not.toContain(state.skipEventId);
            expect(after.skipEventId).toBeNull();
          }
          if (close.lastError !== null) {
            expect(close.stuckEventId).toBe(BigInt(poison ?? -1));
            expect(close.cursor).toBe(BigInt(poison ?? 0) - 1n);
            expect(close.hasMore).toBe(false);
            expect(close.attempts).toBeGreaterThan(0);
          } else {
            expect(close.attempts).toBe(0);
            expect(close.stuckEventId).toBeNull();
          }
          expect(close.status === 'dead').toBe(
            close.attempts >= rules.maxAttempts && close.lastError !== null,
          );
          expect(close.rearmCount).toBe(close.cursor > state.cursor ? 0 : state.rearmCount);
          expect(close.progressed).toBe(close.cursor > state.cursor);
          if (close.filledBatch) expect(close.cursor - state.cursor).toBe(BigInt(limit));
        },
      ),
    );
  });

  test('walked to the end: everything once in order, a poison tried maxAttempts times, then dead or dead-lettered', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 30 }),
        fc.option(fc.integer({ min: 1, max: 30 }), { nil: null }),
        fc.integer({ min: 1, max: 10 }),
        fc.integer({ min: 1, max: 4 }),
        fc.boolean(),
        fc.boolean(),
        (length, poisonAt, limit, maxAttempts, skipApplyErrors, transactional) => {
          const rules = { ...RULES, maxAttempts, skipApplyErrors, transactional };
          const log = Array.from({ length }, (_, i) => BigInt(i + 1));
          const poison = poisonAt !== null && poisonAt <= length ? BigInt(poisonAt) : null;
          let state = idleState();
          const calls: bigint[] = [];
          for (let turn = 0; turn < 200; turn++) {
            const walked = walkTurn(state, log, (id) => id === poison, rules, limit);
            if (!walked.after) {
              // Waiting out the retry delay: time passes.
              state = { ...state, lastErrorAt: ago(3_600_000) };
              continue;
            }
            calls.push(...walked.calls);
            state = walked.after;
            if (state.status === 'dead' || (state.status === 'idle' && state.cursor === BigInt(length)))
              break;
          }
          const poisonCalls = calls.filter((id) => id === poison).length;
          const others = calls.filter((id) => id !== poison);
          if (poison === null || skipApplyErrors) {
            expect(state).toMatchObject({ status: 'idle', cursor: BigInt(length), attempts: 0 });
            expect(others).toEqual(log.filter((id) => id !== poison));
            expect(poisonCalls).toBe(poison === null ? 0 : maxAttempts);
          } else {
            // Halted on the poison: everything before it once, nothing after it, dead after
            // maxAttempts calls, the cursor just before it.
            expect(state).toMatchObject({ status: 'dead', cursor: poison - 1n, stuckEventId: poison });
            expect(others).toEqual(log.filter((id) => id < poison));
            expect(poisonCalls).toBe(maxAttempts);
          }
        },
      ),
    );
  });

  test('a turn that does not reach its stuck event keeps the attempts on it', () => {
    // Event 5 failed twice; this turn sees nothing above its cursor (5 is not visible to it).
    const state = idleState({
      cursor: 4n,
      attempts: 2,
      stuckEventId: 5n,
      lastError: 'boom',
      lastErrorAt: ago(3_600_000),
    });
    const turn = walkTurn(state, [1n, 2n, 3n, 4n], () => false, RULES, 10);
    expect(turn.close).toMatchObject({ cursor: 4n, attempts: 2, stuckEventId: 5n, status: 'idle' });
  });

  test('a crash counts against the event it happened on, and maxAttempts crashes end it unhandled', () => {
    // Each crash leaves a start that never committed (the marker); the turn after it isolates the batch.
    const rules = { ...RULES, maxAttempts: 2 };
    const log = [1n, 2n, 3n, 4n];
    const state = idleState();
    const once = walkTurn(state, log, () => false, rules, 10, {
      first: 1n,
      last: 4n,
      started: 1,
      isolateUntil: null,
    });
    expect(once.plan?.ids).toEqual([1n]);
    expect(once.calls).toEqual([1n]);
    expect(once.close?.keepIsolating).toBe(4n);
    const twice = walkTurn(state, log, () => false, rules, 10, {
      first: 1n,
      last: 4n,
      started: 2,
      isolateUntil: null,
    });
    expect(twice.plan?.crashedOut).toBe(true);
    expect(twice.calls).toEqual([]);
    expect(twice.close).toMatchObject({ status: 'dead', stuckEventId: 1n, cursor: 0n, attempts: 2 });
  });

  test('attempts the row counts up to maxAttempts without a crash get one more call, and its failure ends it with its own error', () => {
    // A dead consumer disabled, then enabled (the disable kept its attempts), or maxAttempts lowered.
    const rules = { ...RULES, maxAttempts: 2 };
    const state = idleState({ attempts: 3, stuckEventId: 1n, lastError: 'boom 1' });
    const turn = walkTurn(state, [1n, 2n], (id) => id === 1n, rules, 10);
    expect(turn.plan?.crashedOut).toBe(false);
    expect(turn.calls).toEqual([1n]);
    expect(turn.close).toMatchObject({ status: 'dead', stuckEventId: 1n, attempts: 4 });
    expect(turn.close?.lastError).not.toMatch(/process stopped/);
    const healed = walkTurn(state, [1n, 2n], () => false, rules, 10);
    expect(healed.close).toMatchObject({ status: 'idle', cursor: 2n, attempts: 0, stuckEventId: null });
  });
});

function cmp(a: bigint, b: bigint): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import {
  deliverableIds,
  settleStragglers,
  settleTurn,
  type FetchResult,
  type GapRange,
  type TurnInput,
  isRunning,
  lowestEnded,
  othersMayCommit,
  parseSnapshot,
  subtransactionXid,
  runningBelow,
} from './gaps.js';

const r = (from: number, to: number, fence: number | null = null): GapRange => ({
  from: BigInt(from),
  to: BigInt(to),
  fence: fence === null ? null : BigInt(fence),
});
const ids = (...values: number[]) => values.map(BigInt);
const fetched = (values: number[], xmin: number, complete = true): FetchResult => ({
  ids: ids(...values),
  xmin: BigInt(xmin),
  complete,
});

function turn(input: TurnInput, delivered = deliverableIds(input)) {
  return settleTurn(input, delivered);
}

describe('fast ordering', () => {
  test('holes between fetched ids become unfenced ranges; the cursor moves to the last id', () => {
    const result = turn({
      cursor: 10n,
      rechecked: [],
      fetch: fetched([11, 13, 14, 17], 100),
      ordering: 'fast',
    });
    expect(result.cursor).toBe(17n);
    expect(result.ranges).toEqual([r(12, 12), r(15, 16)]);
    expect(result.burnt).toEqual([]);
  });

  test('a late commit inside a range is delivered first and carved out, splitting the range', () => {
    const input: TurnInput = {
      cursor: 20n,
      rechecked: [r(5, 9, 50)],
      fetch: fetched([7, 21], 40),
      ordering: 'fast',
    };
    expect(deliverableIds(input)).toEqual(ids(7, 21));
    const result = turn(input);
    expect(result.ranges).toEqual([r(5, 6, 50), r(8, 9, 50)]);
    expect(result.lateDeliveries).toBe(1);
    expect(result.cursor).toBe(21n);
  });

  test('a range burns only once xmin has passed its fence', () => {
    const held = turn({ cursor: 20n, rechecked: [r(5, 9, 50)], fetch: fetched([], 50), ordering: 'fast' });
    expect(held.ranges).toEqual([r(5, 9, 50)]);
    expect(held.burnt).toEqual([]);
    const free = turn({ cursor: 20n, rechecked: [r(5, 9, 50)], fetch: fetched([], 51), ordering: 'fast' });
    expect(free.ranges).toEqual([]);
    expect(free.burnt).toEqual([r(5, 9, 50)]);
    expect(free.burntIdCount).toBe(5n);
  });

  test('an unfenced range never burns', () => {
    const result = turn({
      cursor: 20n,
      rechecked: [r(5, 9)],
      fetch: fetched([], 1_000_000),
      ordering: 'fast',
    });
    expect(result.ranges).toEqual([r(5, 9)]);
  });

  test('a fetch cut short by LIMIT burns nothing beyond its last id', () => {
    const result = turn({
      cursor: 100n,
      rechecked: [r(5, 9, 50), r(20, 30, 50)],
      fetch: fetched([6, 7], 60, false),
      ordering: 'fast',
    });
    // 5 is below the last fetched id (7) and absent: burnt. 8..9 and 20..30 were never examined.
    expect(result.burnt).toEqual([r(5, 5, 50)]);
    expect(result.ranges).toEqual([r(8, 9, 50), r(20, 30, 50)]);
    expect(result.needsRecheck).toBe(true);
  });

  test('a fetched id left undelivered by a halt stays pending even when its range could burn', () => {
    const input: TurnInput = {
      cursor: 20n,
      rechecked: [r(5, 9, 50)],
      fetch: fetched([7, 21], 60),
      ordering: 'fast',
    };
    const result = settleTurn(input, []); // the handler failed on 7
    expect(result.ranges).toEqual([r(7, 7, 50)]);
    expect(result.burnt).toEqual([r(5, 6, 50), r(8, 9, 50)]);
    expect(result.cursor).toBe(20n);
    expect(result.needsRecheck).toBe(true);
  });

  test('a halt above the cursor keeps the cursor before the failing event', () => {
    const input: TurnInput = {
      cursor: 10n,
      rechecked: [],
      fetch: fetched([11, 13, 14], 60),
      ordering: 'fast',
    };
    const result = settleTurn(input, ids(11)); // failed on 13
    expect(result.cursor).toBe(11n);
    expect(result.ranges).toEqual([]); // 12 is above the new cursor: the next fetch sees it
  });

  test('a pruned stretch of a million ids is one range', () => {
    const result = turn({ cursor: 0n, rechecked: [], fetch: fetched([1_000_001], 5), ordering: 'fast' });
    expect(result.ranges).toEqual([r(1, 1_000_000)]);
  });

  test('ids around 2^53 and 9/10 digits stay exact', () => {
    const base = 2n ** 53n;
    const result = turn({
      cursor: base - 2n,
      rechecked: [],
      fetch: { ids: [base - 1n, base + 2n], xmin: 1n, complete: true },
      ordering: 'fast',
    });
    expect(result.cursor).toBe(base + 2n);
    expect(result.ranges).toEqual([{ from: base, to: base + 1n, fence: null }]);
    const digits = turn({
      cursor: 999_999_998n,
      rechecked: [],
      fetch: fetched([1_000_000_001], 1),
      ordering: 'fast',
    });
    expect(digits.ranges).toEqual([r(999_999_999, 1_000_000_000)]);
  });
});

describe('strict ordering', () => {
  test('holds the cursor at the first hole and delivers nothing past it', () => {
    const input: TurnInput = {
      cursor: 10n,
      rechecked: [],
      fetch: fetched([11, 13, 14], 60),
      ordering: 'strict',
    };
    expect(deliverableIds(input)).toEqual(ids(11));
    const result = turn(input);
    expect(result.cursor).toBe(11n);
    expect(result.ranges).toEqual([r(12, 12)]);
  });

  test('records every hole the fetch saw above the cursor, so one fence covers them all', () => {
    const input: TurnInput = {
      cursor: 10n,
      rechecked: [],
      fetch: fetched([11, 13, 14, 17, 20], 60),
      ordering: 'strict',
    };
    const result = turn(input);
    expect(result.cursor).toBe(11n);
    expect(result.ranges).toEqual([r(12, 12), r(15, 16), r(18, 19)]);
  });

  test('passes the hole once its fenced range burns', () => {
    const input: TurnInput = {
      cursor: 11n,
      rechecked: [r(12, 12, 50)],
      fetch: fetched([13, 14], 51),
      ordering: 'strict',
    };
    expect(deliverableIds(input)).toEqual(ids(13, 14));
    const result = turn(input);
    expect(result.cursor).toBe(14n);
    expect(result.ranges).toEqual([]);
    expect(result.burnt).toEqual([r(12, 12, 50)]);
  });

  test('delivers the late id when the hole fills', () => {
    const input: TurnInput = {
      cursor: 11n,
      rechecked: [r(12, 12, 50)],
      fetch: fetched([12, 13], 40),
      ordering: 'strict',
    };
    const result = turn(input);
    expect(result.cursor).toBe(13n);
    expect(result.ranges).toEqual([]);
    expect(result.burnt).toEqual([]);
  });

  test('keeps waiting while the horizon is held', () => {
    const input: TurnInput = {
      cursor: 11n,
      rechecked: [r(12, 12, 50)],
      fetch: fetched([13], 50),
      ordering: 'strict',
    };
    expect(deliverableIds(input)).toEqual([]);
    expect(turn(input).ranges).toEqual([r(12, 12, 50)]);
  });
});

describe('ranges the other ordering left (the ordering changed at a restart)', () => {
  test('strict ordering keeps a range fast ordering left behind the cursor until its fence passes, and delivers its late id', () => {
    const held: TurnInput = {
      cursor: 13n,
      rechecked: [r(12, 12, 50)],
      fetch: fetched([14], 50),
      ordering: 'strict',
    };
    expect(deliverableIds(held)).toEqual([14n]);
    expect(turn(held)).toMatchObject({ cursor: 14n, ranges: [r(12, 12, 50)], burnt: [] });

    const committed: TurnInput = { ...held, fetch: fetched([12, 14], 60) };
    expect(deliverableIds(committed)).toEqual([12n, 14n]);
    expect(turn(committed)).toMatchObject({ cursor: 14n, ranges: [], burnt: [], lateDeliveries: 1 });

    const rolledBack: TurnInput = { ...held, fetch: fetched([14], 60) };
    expect(turn(rolledBack)).toMatchObject({ cursor: 14n, ranges: [], burnt: [r(12, 12, 50)] });
  });

  test('fast ordering drops a range strict ordering kept ahead of the cursor, and finds its hole anew', () => {
    const input: TurnInput = {
      cursor: 11n,
      rechecked: [r(12, 12, 50)],
      fetch: fetched([13, 14], 50),
      ordering: 'fast',
    };
    expect(deliverableIds(input)).toEqual([13n, 14n]);
    expect(turn(input)).toMatchObject({ cursor: 14n, ranges: [r(12, 12)], burnt: [] });
    // A turn that halts before it: nothing is kept for the hole, the next fetch reads it again.
    expect(turn(input, [])).toMatchObject({ cursor: 11n, ranges: [], burnt: [] });
  });
});

describe("a 'now' consumer's stragglers", () => {
  const start = { after: 0n, upto: 20n };

  test('are delivered first, before the events above the cursor, in either ordering', () => {
    for (const ordering of ['fast', 'strict'] as const) {
      const input: TurnInput = {
        cursor: 20n,
        rechecked: [],
        fetch: fetched([4, 9, 21, 22], 100),
        ordering,
        stragglersUpTo: 20n,
      };
      expect(deliverableIds(input)).toEqual(ids(4, 9, 21, 22));
      const settled = settleTurn(input, deliverableIds(input));
      expect(settled.cursor).toBe(22n);
      expect(settled.ranges).toEqual([]);
    }
  });

  test('a complete fetch, all delivered: done', () => {
    expect(settleStragglers(start, fetched([4, 9, 21], 100), ids(4, 9, 21), 3)).toBe('done');
  });

  test('a failure stops the progress just below the event that failed', () => {
    expect(settleStragglers(start, fetched([4, 9, 21], 100), ids(4, 9, 21), 1)).toBe(8n);
    expect(settleStragglers(start, fetched([4, 9, 21], 100), ids(4, 9, 21), 0)).toBe(3n);
    // A failure above upto leaves every straggler delivered.
    expect(settleStragglers(start, fetched([4, 9, 21], 100), ids(4, 9, 21), 2)).toBe('done');
  });

  test('a fetch cut by LIMIT examined nothing above its last id', () => {
    expect(settleStragglers(start, fetched([4, 9], 100, false), ids(4, 9), 2)).toBe(9n);
    expect(settleStragglers({ after: 12n, upto: 20n }, fetched([], 100, true), [], 0)).toBe('done');
  });

  test('never goes back', () => {
    expect(settleStragglers({ after: 12n, upto: 20n }, fetched([13], 100), ids(13), 0)).toBe(12n);
  });
});

describe('snapshots', () => {
  test('parse the text form and tell running xids apart', () => {
    const snap = parseSnapshot('100:110:104,101');
    expect(snap).toEqual({ xmin: 100n, xmax: 110n, xip: [101n, 104n] });
    expect(isRunning(snap, 99n)).toBe(false);
    expect(isRunning(snap, 101n)).toBe(true);
    expect(isRunning(snap, 102n)).toBe(false);
    expect(isRunning(snap, 110n)).toBe(true); // at or above xmax: not completed
  });

  test("othersMayCommit: a 'now' registration's fence waits only for xids that are not its own", () => {
    // A quiet database: the insert drew its top-level xid (the snapshot's xmax) and then the fence.
    expect(othersMayCommit(parseSnapshot('1040:1040:'), 1040n, 1041n)).toBe(false);
    // A writer drew an xid in between.
    expect(othersMayCommit(parseSnapshot('1040:1040:'), 1040n, 1042n)).toBe(true);
    // The top-level xid was drawn before the snapshot (the versions' registration wrote first).
    expect(othersMayCommit(parseSnapshot('739:739:'), 738n, 739n)).toBe(false);
    expect(othersMayCommit(parseSnapshot('739:742:740'), 739n, 742n)).toBe(true);
    expect(othersMayCommit(parseSnapshot('739:741:'), 739n, 742n)).toBe(true);
  });

  test('subtransactionXid takes the epoch of its parent, or the next one past a wrap', () => {
    const epoch = 3n << 32n;
    expect(subtransactionXid(1041n, epoch + 1040n)).toBe(epoch + 1041n);
    expect(subtransactionXid(5n, epoch + 0xfffffff0n)).toBe((4n << 32n) + 5n);
  });

  test('runningBelow counts allocated xids at or above xmax as running', () => {
    expect(runningBelow(parseSnapshot('100:103:101'), 106n)).toEqual([101n, 103n, 104n, 105n]);
    expect(runningBelow(parseSnapshot('100:103:101'), 101n)).toEqual([]);
  });

  test('lowestEnded names the lowest watched xid that has finished', () => {
    const now = parseSnapshot('102:120:105');
    expect(lowestEnded([101n, 105n, 108n], now)).toBe(101n);
    expect(lowestEnded([105n, 125n], now)).toBeNull();
  });
});

// Reference model: the same turn computed over explicit id sets.
function referenceSettle(input: TurnInput, delivered: readonly bigint[]) {
  const pending = new Map<bigint, bigint | null>();
  for (const range of input.rechecked)
    for (let id = range.from; id <= range.to; id++) pending.set(id, range.fence);
  const last = input.fetch.ids[input.fetch.ids.length - 1];
  const horizon = input.fetch.complete || last === undefined ? 2n ** 62n : last;
  const fetchedSet = new Set(input.fetch.ids);
  const deliveredSet = new Set(delivered);
  let cursor = input.cursor;
  for (const id of delivered) if (id > cursor) cursor = id;
  const result = new Map<bigint, bigint | null>();
  for (const [id, fence] of pending) {
    if (deliveredSet.has(id)) continue;
    const burnable = fence !== null && fence < input.fetch.xmin && id <= horizon && !fetchedSet.has(id);
    if (!burnable) result.set(id, fence);
  }
  for (let id = input.cursor + 1n; id <= cursor; id++) if (!fetchedSet.has(id)) result.set(id, null);
  return { cursor, pending: result };
}

function expand(ranges: readonly GapRange[]): Map<bigint, bigint | null> {
  const out = new Map<bigint, bigint | null>();
  for (const range of ranges) for (let id = range.from; id <= range.to; id++) out.set(id, range.fence);
  return out;
}

const fastScenario = fc
  .record({
    cursor: fc.integer({ min: 20, max: 40 }),
    pendingIds: fc.uniqueArray(fc.integer({ min: 1, max: 40 }), { maxLength: 15 }),
    fences: fc.array(fc.option(fc.integer({ min: 40, max: 60 }), { nil: null }), {
      minLength: 15,
      maxLength: 15,
    }),
    visiblePending: fc.array(fc.boolean(), { minLength: 15, maxLength: 15 }),
    newIds: fc.uniqueArray(fc.integer({ min: 1, max: 25 }), { maxLength: 12 }),
    xmin: fc.integer({ min: 35, max: 65 }),
    limit: fc.integer({ min: 1, max: 30 }),
    deliveredFraction: fc.double({ min: 0, max: 1, noNaN: true }),
  })
  .map((s) => {
    const cursor = BigInt(s.cursor);
    const pending = s.pendingIds.filter((id) => id <= s.cursor).sort((a, b) => a - b);
    // Ranges: consecutive pending ids with equal fence form one range.
    const rechecked: GapRange[] = [];
    pending.forEach((id, i) => {
      const fence = s.fences[i] ?? null;
      const prev = rechecked[rechecked.length - 1];
      if (prev && prev.to === BigInt(id - 1) && prev.fence === (fence === null ? null : BigInt(fence))) {
        rechecked[rechecked.length - 1] = { ...prev, to: BigInt(id) };
      } else {
        rechecked.push(r(id, id, fence));
      }
    });
    const visible = pending.filter((_, i) => s.visiblePending[i]).map(BigInt);
    const above = s.newIds.map((n) => cursor + BigInt(n));
    const all = [...new Set([...visible, ...above])].sort((a, b) => (a < b ? -1 : 1));
    const complete = all.length <= s.limit;
    const fetch: FetchResult = { ids: all.slice(0, s.limit), complete, xmin: BigInt(s.xmin) };
    const input: TurnInput = { cursor, rechecked, fetch, ordering: 'fast' };
    const deliverable = deliverableIds(input);
    const delivered = deliverable.slice(0, Math.floor(deliverable.length * s.deliveredFraction));
    return { input, delivered };
  });

describe('fast ordering against a reference model (property)', () => {
  test('settleTurn keeps exactly the ids the model keeps, with their fences', () => {
    fc.assert(
      fc.property(fastScenario, ({ input, delivered }) => {
        const actual = settleTurn(input, delivered);
        const expected = referenceSettle(input, delivered);
        expect(actual.cursor).toBe(expected.cursor);
        expect(expand(actual.ranges)).toEqual(expected.pending);
        // Ranges are sorted, disjoint and well-formed; none holds a delivered id.
        for (let i = 0; i < actual.ranges.length; i++) {
          const range = actual.ranges[i]!;
          expect(range.from <= range.to).toBe(true);
          if (i > 0) expect(actual.ranges[i - 1]!.to < range.from).toBe(true);
          for (const id of delivered) expect(id >= range.from && id <= range.to).toBe(false);
        }
        // Burnt + kept + delivered accounts for every rechecked id.
        const before = expand(input.rechecked).size;
        const deliveredFromRanges = delivered.filter((id) => expand(input.rechecked).has(id)).length;
        const keptFromRanges = [...expand(actual.ranges).keys()].filter((id) => id <= input.cursor).length;
        expect(BigInt(before)).toBe(actual.burntIdCount + BigInt(deliveredFromRanges + keptFromRanges));
      }),
      { numRuns: 2000 },
    );
  });
});

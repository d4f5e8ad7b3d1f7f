// Pure gap arithmetic (docs/design.md §5), and below it the pg_snapshot arithmetic of the gap watch
// (docs/design.md §5.5). No I/O: the turn gathers the inputs and writes the result.
//
// A pending range {from, to, fence} holds ids a consumer has passed without seeing. Its fence is
// an xid allocated *after* the snapshot that observed the hole (the next turn's own xid), and the
// xid-before-id trigger makes every writer of an id in the range hold an xid below that fence. So
// once a statement's pg_snapshot_xmin is above the fence, every such writer has ended, and the same
// statement's fetch sees each committed id of the range: what it does not return is burnt.

export interface GapRange {
  readonly from: bigint;
  readonly to: bigint;
  /** null until the next turn fences it with its own xid. */
  readonly fence: bigint | null;
}

export type Ordering = 'fast' | 'strict';

/** What one fetch statement saw: the visible ids it returned and its snapshot's xmin. */
export interface FetchResult {
  /** Ascending, distinct: ids above the cursor and ids inside the rechecked ranges. */
  readonly ids: readonly bigint[];
  /** False when LIMIT cut the fetch short: ids above the last one returned were not examined. */
  readonly complete: boolean;
  readonly xmin: bigint;
}

export interface TurnInput {
  readonly cursor: bigint;
  /**
   * A 'now' consumer's stragglers (events in flight when it registered, all at or below this id and
   * the cursor) are among the fetched ids: delivered first, whatever the ordering.
   */
  readonly stragglersUpTo?: bigint;
  /** The pending ranges re-fetched by this turn (sorted, disjoint); others are left untouched. */
  readonly rechecked: readonly GapRange[];
  readonly fetch: FetchResult;
  readonly ordering: Ordering;
}

export interface Settlement {
  readonly cursor: bigint;
  /** Replaces `rechecked` (what is left of those ranges), plus the new holes (unfenced). */
  readonly ranges: readonly GapRange[];
  /** Ids given up for good, as ranges (for metrics and logs). */
  readonly burnt: readonly GapRange[];
  readonly burntIdCount: bigint;
  /**
   * Delivered ids that came from a pending range (committed late, below the high mark), but for
   * those only passed over (another lane's, or a type the consumer does not take).
   */
  readonly lateDeliveries: number;
  /** Some rechecked id stays pending although it was visible or not examined: recheck next turn. */
  readonly needsRecheck: boolean;
}

/**
 * The ids this turn delivers, in order. Fast ordering delivers everything fetched (late gap ids
 * come first: they are below the cursor). Strict ordering delivers the contiguous prefix above the
 * cursor and stops at the first hole it cannot burn.
 */
export function deliverableIds(input: TurnInput): bigint[] {
  const { cursor, fetch, ordering } = input;
  if (ordering === 'fast') return [...fetch.ids];
  const out: bigint[] = [];
  let expected = cursor + 1n;
  const passed = passedRanges(input);
  for (const id of fetch.ids) {
    if (id < expected) {
      if (input.stragglersUpTo !== undefined && id <= input.stragglersUpTo) out.push(id);
      else if (passed.length > 0 && inRanges(passed, id)) out.push(id);
      continue;
    }
    if (id > expected && !isBurnable(input.rechecked, expected, id - 1n, fetch.xmin)) break;
    out.push(id);
    expected = id + 1n;
  }
  return out;
}

/**
 * The state after delivering `delivered`, a prefix of deliverableIds(input) (shorter when a handler
 * failed). Delivered ids are carved out of their ranges (never merged over), holes between newly
 * delivered ids become unfenced ranges, and rechecked ranges that can be proven empty are burnt.
 * `passedOver`: the delivered ids that no handler was given (not counted as late deliveries).
 */
export function settleTurn(
  input: TurnInput,
  delivered: readonly bigint[],
  passedOver: ReadonlySet<bigint> = NONE,
): Settlement {
  return input.ordering === 'fast'
    ? settleFast(input, delivered, passedOver)
    : settleStrict(input, delivered, passedOver);
}

const NONE: ReadonlySet<bigint> = new Set();

function settleFast(
  input: TurnInput,
  delivered: readonly bigint[],
  passedOver: ReadonlySet<bigint>,
): Settlement {
  const { cursor, rechecked, fetch } = input;
  const deliveredSorted = sortedForCarving(rechecked, delivered);
  const kept: GapRange[] = [];
  const burnt: GapRange[] = [];
  let needsRecheck = false;

  for (const range of rechecked) {
    // A range above the cursor was left by strict ordering (fast ordering's ranges are all behind
    // its cursor): this fetch read everything above the cursor anyway, and the holes it passes are
    // found again below. Kept, it would stand beside the same hole found anew.
    if (range.from > cursor) continue;
    if (settlePassedRange(range, deliveredSorted, fetch, kept, burnt)) needsRecheck = true;
  }

  let newCursor = cursor;
  let lateDeliveries = 0;
  for (const id of delivered) {
    if (id > newCursor) newCursor = id;
    else if (id <= cursor && !passedOver.has(id)) lateDeliveries += 1;
  }
  // Holes between the ids delivered above the old cursor: passed without being seen.
  let expected = cursor + 1n;
  for (const id of fetch.ids) {
    if (id <= cursor) continue;
    if (id > newCursor) break;
    if (id > expected) kept.push({ from: expected, to: id - 1n, fence: null });
    expected = id + 1n;
  }
  return finish(newCursor, kept, burnt, lateDeliveries, needsRecheck);
}

function settleStrict(
  input: TurnInput,
  delivered: readonly bigint[],
  passedOver: ReadonlySet<bigint>,
): Settlement {
  const { cursor, rechecked, fetch } = input;
  const newCursor = delivered.length > 0 ? max(cursor, delivered[delivered.length - 1] ?? cursor) : cursor;
  const deliveredSorted = sortedForCarving(rechecked, delivered);
  const kept: GapRange[] = [];
  const burnt: GapRange[] = [];
  let passedNeedRecheck = false;
  const passed = passedRanges(input);
  const lateDeliveries =
    passed.length === 0
      ? 0
      : delivered.filter((id) => id <= cursor && !passedOver.has(id) && inRanges(passed, id)).length;
  for (const range of rechecked) {
    if (range.from <= cursor) {
      // Left by fast ordering (strict ordering keeps only ranges ahead of its cursor): its ids may
      // still commit, and are delivered late, as fast ordering would; burnt only past its fence.
      if (settlePassedRange(range, deliveredSorted, fetch, kept, burnt)) passedNeedRecheck = true;
      continue;
    }
    for (const piece of carve(range, deliveredSorted)) {
      // Holes the cursor has moved past were burnable when passed (deliverableIds checked it).
      if (piece.to <= newCursor) {
        burnt.push(piece);
      } else if (piece.from <= newCursor) {
        burnt.push({ from: piece.from, to: newCursor, fence: piece.fence });
        kept.push({ from: newCursor + 1n, to: piece.to, fence: piece.fence });
      } else {
        kept.push(piece);
      }
    }
  }
  // Every hole between the ids this fetch saw above the cursor, not only the one the cursor waits
  // at: they share one observing snapshot, so one fence covers them all and a single advance of
  // the horizon lets the cursor cross the whole fetched stretch instead of one hole per wait.
  const above = fetch.ids.filter((id) => id > newCursor).sort(compare);
  // The next id is visible and contiguous but was not delivered: the turn halted before it.
  const needsRecheck = passedNeedRecheck || (above[0] === newCursor + 1n && kept.length > 0);
  kept.sort((a, b) => compare(a.from, b.from));
  const holes = holesBetween(newCursor, above, kept);
  return finish(newCursor, [...kept, ...holes], burnt, lateDeliveries, needsRecheck);
}

/**
 * A rechecked range behind the cursor, after the turn (fast ordering's, docs/design.md §5): the
 * delivered ids are carved out; what is left is burnt where its fence is below the fetch's xmin
 * (every writer of its ids has ended, and the fetch saw each committed one), except ids the fetch
 * saw but the turn did not deliver (it halted) and what lies above the examined horizon. Pushes to
 * `kept` and `burnt`; returns whether something kept must be re-fetched next turn.
 */
function settlePassedRange(
  range: GapRange,
  deliveredSorted: readonly bigint[],
  fetch: FetchResult,
  kept: GapRange[],
  burnt: GapRange[],
): boolean {
  const horizon = examinedHorizon(fetch);
  const burnable = range.fence !== null && range.fence < fetch.xmin;
  let needsRecheck = false;
  for (const piece of carve(range, deliveredSorted)) {
    if (!burnable) {
      // Ids visible but not delivered (the turn halted) stay pending and must be re-fetched.
      if (hasIdIn(fetch.ids, piece.from, piece.to) || piece.to > horizon) needsRecheck = true;
      kept.push(piece);
      continue;
    }
    // Provably resolved below the horizon: keep only what is visible-but-undelivered and what lies above it.
    let start = piece.from;
    for (const id of idsIn(fetch.ids, piece.from, min(piece.to, horizon))) {
      if (id > start) burnt.push({ from: start, to: id - 1n, fence: piece.fence });
      kept.push({ from: id, to: id, fence: piece.fence });
      needsRecheck = true;
      start = id + 1n;
    }
    const burnEnd = min(piece.to, horizon);
    if (start <= burnEnd) burnt.push({ from: start, to: burnEnd, fence: piece.fence });
    if (piece.to > horizon) {
      kept.push({ from: max(piece.from, horizon + 1n), to: piece.to, fence: piece.fence });
      needsRecheck = true;
    }
  }
  return needsRecheck;
}

/**
 * The rechecked ranges behind the cursor: all of fast ordering's; a strict turn's are left by fast
 * ordering before the consumer's ordering changed (strict ordering keeps only ranges ahead of its
 * cursor).
 */
export function passedRanges(
  input: Pick<TurnInput, 'cursor' | 'rechecked' | 'ordering'>,
): readonly GapRange[] {
  if (input.ordering === 'fast') return input.rechecked;
  return input.rechecked.length === 0
    ? input.rechecked
    : input.rechecked.filter((r) => r.from <= input.cursor);
}

/** Whether `id` lies in one of `ranges` (sorted, disjoint). */
function inRanges(ranges: readonly GapRange[], id: bigint): boolean {
  let lo = 0;
  let hi = ranges.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    const range = ranges[mid] as GapRange;
    if (range.to < id) lo = mid + 1;
    else if (range.from > id) hi = mid;
    else return true;
  }
  return false;
}

/**
 * How far a 'now' consumer's straggler delivery has got after a turn that fetched them: every
 * straggler up to the returned id was delivered ('done': up to `upto`, nothing is left). The turn
 * delivered `deliverable` (ascending) up to `resolvedCount` of them; a fetch cut by LIMIT examined
 * nothing above its last id.
 */
export function settleStragglers(
  start: { readonly after: bigint; readonly upto: bigint },
  fetch: FetchResult,
  deliverable: readonly bigint[],
  resolvedCount: number,
): bigint | 'done' {
  const firstUndelivered = deliverable[resolvedCount];
  const reached = min(
    min(start.upto, examinedHorizon(fetch)),
    firstUndelivered === undefined ? MAX_ID : firstUndelivered - 1n,
  );
  if (reached >= start.upto) return 'done';
  return max(start.after, reached);
}

function finish(
  cursor: bigint,
  kept: GapRange[],
  burnt: GapRange[],
  lateDeliveries: number,
  needsRecheck: boolean,
): Settlement {
  kept.sort((a, b) => compare(a.from, b.from));
  const burntIdCount = burnt.reduce((sum, r) => sum + (r.to - r.from + 1n), 0n);
  return { cursor, ranges: kept, burnt, burntIdCount, lateDeliveries, needsRecheck };
}

/** Whether every id of [from, to] lies in a fenced rechecked range whose fence is below xmin. */
function isBurnable(ranges: readonly GapRange[], from: bigint, to: bigint, xmin: bigint): boolean {
  let next = from;
  for (const range of ranges) {
    if (range.to < next) continue;
    if (range.from > next) return false;
    if (range.fence === null || range.fence >= xmin) return false;
    next = range.to + 1n;
    if (next > to) return true;
  }
  return false;
}

/** The pieces of `range` left after removing the ids in `removed` (ascending). */
function carve(range: GapRange, removed: readonly bigint[]): GapRange[] {
  const inside = idsIn(removed, range.from, range.to);
  if (inside.length === 0) return [range];
  const pieces: GapRange[] = [];
  let start = range.from;
  for (const id of inside) {
    if (id > start) pieces.push({ from: start, to: id - 1n, fence: range.fence });
    start = id + 1n;
  }
  if (start <= range.to) pieces.push({ from: start, to: range.to, fence: range.fence });
  return pieces;
}

/** Sub-intervals of [from, to] not covered by `ranges`. */
/**
 * The ids between `start` and each of the ascending `ids` that no range of `ranges` covers, as new
 * unfenced ranges. One merge pass (a batch holds up to maxBatchSize ids and thousands of ranges can
 * be pending: a scan of the ranges per hole stalled a dispatcher for seconds).
 * @param ranges sorted by `from`, disjoint
 */
function holesBetween(start: bigint, ids: readonly bigint[], ranges: readonly GapRange[]): GapRange[] {
  const holes: GapRange[] = [];
  let k = 0;
  let previous = start;
  for (const id of ids) {
    const to = id - 1n;
    let next = previous + 1n;
    while (k < ranges.length && (ranges[k] as GapRange).to < next) k += 1;
    for (let j = k; next <= to && j < ranges.length; j += 1) {
      const range = ranges[j] as GapRange;
      if (range.from > to) break;
      if (range.from > next) holes.push({ from: next, to: range.from - 1n, fence: null });
      next = max(next, range.to + 1n);
    }
    if (next <= to) holes.push({ from: next, to, fence: null });
    previous = id;
  }
  return holes;
}

/**
 * The delivered ids in ascending order, for carving them out of the rechecked ranges: none needed
 * when there is no range (a turn that read only above its cursor, as most do), and no copy when
 * they already ascend (they do unless late gap ids came first).
 */
function sortedForCarving(rechecked: readonly GapRange[], delivered: readonly bigint[]): readonly bigint[] {
  if (rechecked.length === 0) return [];
  for (let i = 1; i < delivered.length; i++) {
    if ((delivered[i] as bigint) < (delivered[i - 1] as bigint)) return [...delivered].sort(compare);
  }
  return delivered;
}

function examinedHorizon(fetch: FetchResult): bigint {
  const last = fetch.ids[fetch.ids.length - 1];
  return fetch.complete || last === undefined ? MAX_ID : last;
}

/** The ids of ascending `ids` within [from, to], by binary search (ranges can number 100k). */
function idsIn(ids: readonly bigint[], from: bigint, to: bigint): bigint[] {
  const out: bigint[] = [];
  for (let i = lowerBound(ids, from); i < ids.length; i++) {
    const id = ids[i] as bigint;
    if (id > to) break;
    out.push(id);
  }
  return out;
}

function hasIdIn(ids: readonly bigint[], from: bigint, to: bigint): boolean {
  const id = ids[lowerBound(ids, from)];
  return id !== undefined && id <= to;
}

/** Index of the first element of ascending `ids` that is >= value. */
function lowerBound(ids: readonly bigint[], value: bigint): number {
  let lo = 0;
  let hi = ids.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((ids[mid] as bigint) < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

const MAX_ID = 2n ** 63n - 1n;

export function compare(a: bigint, b: bigint): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function min(a: bigint, b: bigint): bigint {
  return a < b ? a : b;
}

function max(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}

/** Number of ids in the ranges. */
export function idCount(ranges: readonly GapRange[]): bigint {
  return ranges.reduce((sum, r) => sum + (r.to - r.from + 1n), 0n);
}

// ---- pg_snapshot arithmetic for the gap watch (docs/design.md §5.5): pure functions over parsed snapshots.
//
// Why a watch list: with the horizon held (a transaction left open anywhere in the cluster),
// ranges cannot burn and pile up under rollback-heavy load. Re-fetching all of them every turn
// would make a turn's cost grow with their number. A range can only gain a visible id when a
// transaction with an xid below its fence ends, so each turn records the transactions that were
// still running below the highest fence ("watch"). The next turn re-fetches only ranges fenced
// above the lowest watched xid that has ended since, plus unfenced and burnable ones; the idle
// pre-check skips the consumer while every watched xid is still running.

export interface Snapshot {
  readonly xmin: bigint;
  readonly xmax: bigint;
  /** In-progress xids in [xmin, xmax), ascending. */
  readonly xip: readonly bigint[];
}

/**
 * The full (epoch-qualified) xid of a subtransaction drawn after its top-level transaction's xid
 * `top`, from the 32-bit xid a row's xmin shows (`sub`): its epoch is the top-level xid's, or the
 * next one when the 32-bit counter wrapped since that was drawn.
 */
export function subtransactionXid(sub: bigint, top: bigint): bigint {
  const xid = ((top >> 32n) << 32n) | sub;
  return xid > top ? xid : xid + (1n << 32n);
}

/**
 * Whether a transaction other than the registering one (top-level xid `top`) may still commit
 * something `snapshot` did not see, by the time the registration drew `fence` (an xid of its own,
 * after the snapshot): an xid the snapshot lists as running, or one drawn from its xmax up to the
 * fence that is not the registration's own (it draws `top` in the same statement when it had none).
 */
export function othersMayCommit(snapshot: Snapshot, top: bigint, fence: bigint): boolean {
  const ours = top >= snapshot.xmax && top < fence ? 1n : 0n;
  return snapshot.xip.length > 0 || fence - snapshot.xmax > ours;
}

/** Parses pg_snapshot's text form `xmin:xmax:xip,xip,…`. */
export function parseSnapshot(text: string): Snapshot {
  const [xmin, xmax, xip = ''] = text.split(':');
  if (xmin === undefined || xmax === undefined) throw new Error(`not a pg_snapshot: ${text}`);
  return {
    xmin: BigInt(xmin),
    xmax: BigInt(xmax),
    xip:
      xip === ''
        ? []
        : xip
            .split(',')
            .map((x) => BigInt(x))
            .sort(compare),
  };
}

/** Whether `xid` (already allocated) was still running when the snapshot was taken. */
export function isRunning(snapshot: Snapshot, xid: bigint): boolean {
  if (xid < snapshot.xmin) return false;
  // xmax is one past the latest *completed* xid; an allocated xid at or above it has not completed.
  if (xid >= snapshot.xmax) return true;
  return snapshot.xip.includes(xid);
}

/**
 * The xids below `fence` that were running at `snapshot`. Everything in [xmax, fence) is running:
 * `fence` was allocated, so every xid below it was too, and none of those at or above xmax had
 * completed. (Bounded by the number of open transactions.)
 */
export function runningBelow(snapshot: Snapshot, fence: bigint): bigint[] {
  const running = snapshot.xip.filter((xid) => xid < fence);
  for (let xid = snapshot.xmax; xid < fence; xid++) running.push(xid);
  return running;
}

/** The lowest watched xid that is no longer running at `snapshot`, or null when all still run. */
export function lowestEnded(watch: readonly bigint[], snapshot: Snapshot): bigint | null {
  let lowest: bigint | null = null;
  for (const xid of watch) {
    if (!isRunning(snapshot, xid) && (lowest === null || xid < lowest)) lowest = xid;
  }
  return lowest;
}

/** Parses the comma-separated xid list the queries return for gap_watch. */
export function parseXidList(text: string | null): bigint[] {
  return text === null || text === '' ? [] : text.split(',').map((x) => BigInt(x));
}

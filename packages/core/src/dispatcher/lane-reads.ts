import { passedStub, type EventRecord } from '../events.js';
import type { Snapshot } from '../gaps/gaps.js';
import type { FetchFilter } from '../queries/events.js';
import { settleWithin, TIMED_OUT } from '../time-limit.js';
import type { EventBatch } from './shared-reads.js';

/** One read of the log for every lane of a consumer (docs/design.md §11.2): every event, with its lane. */
export interface GroupBatch {
  /** Ascending ids, all above the cursor the batch was read from. */
  readonly events: readonly EventRecord[];
  /** Each event's lane (same index as `events`). */
  readonly lanes: Int16Array;
  readonly xmin: bigint;
  readonly snapshots: readonly Snapshot[];
  readonly head: bigint;
}

interface Entry {
  /** The cursor the batch was read from. */
  readonly from: bigint;
  /** The read's LIMIT: a whole batch holds the ids from + 1 … from + limit. */
  readonly limit: number;
  readonly read: Promise<GroupBatch | undefined>;
  /** When the batch was offered or last taken from: lanes still taking from it keep it. */
  atMs: number;
  done?: GroupBatch | undefined;
  settled: boolean;
}

/**
 * Reads of the log shared by the lanes of a consumer that one process turns at once
 * (docs/design.md §11.2): a lane reads every event above its cursor once, with each event's lane
 * (a group read), and the other lanes of this process whose cursor falls inside that batch take
 * what follows their cursor instead of scanning the log themselves. So N lanes catching up together read the log about
 * once per process, not N times.
 *
 * A lane takes a batch only when it has no hole (its ids are exactly from + 1 … from + n): every id
 * in it is committed and visible, so what follows the lane's cursor in it is what the lane's own
 * fetch would return up to the batch's last id (ids are unique, and nothing above a cursor is
 * pruned). A taken batch is partial for the turn: it never tells the lane it has caught up, so its
 * snapshot, older than the lane's lock, decides nothing (docs/design.md §5.4: fetches after the lock).
 * A read still running when taken can be newer than the lane's row read: its snapshot goes with the
 * batch, and the turn chooses its ranges again when it shows a watched writer ended (docs/design.md §5.5).
 */
export class LaneReads {
  readonly #groups = new Map<string, Entry[]>();
  readonly #maxPerGroup: number;
  readonly #maxAgeMs: number;
  /** The read-ahead running, if any: one at a time in the process (it takes a pool connection). */
  #readingAhead: Promise<unknown> | undefined;

  constructor(maxPerGroup: number, maxAgeMs: number) {
    this.#maxPerGroup = maxPerGroup;
    this.#maxAgeMs = maxAgeMs;
  }

  /** Registers a group read from `cursor` of at most `limit` events, running or done. */
  offer(group: string, cursor: bigint, limit: number, read: Promise<GroupBatch>): void {
    const entries = this.#live(group);
    const entry: Entry = {
      from: cursor,
      limit,
      read: read.then(
        (batch) => (isWhole(cursor, batch.events) ? batch : undefined),
        () => undefined,
      ),
      atMs: performance.now(),
      settled: false,
    };
    void entry.read.then((batch) => {
      entry.done = batch;
      entry.settled = true;
    });
    entries.push(entry);
    while (entries.length > this.#maxPerGroup) entries.shift();
    this.#groups.set(group, entries);
  }

  /**
   * Starts `read`, a group read of at most `limit` events above `cursor`, while the lanes still
   * take from the batch that ends there: a lane that reaches its end goes on into the next one
   * (take follows the chain) instead of waiting for a read. None when another read-ahead runs or
   * a read already holds `cursor + 1`.
   */
  readAhead(group: string, cursor: bigint, limit: number, read: () => Promise<GroupBatch>): void {
    if (this.#readingAhead || this.covered(group, cursor)) return;
    const reading = read();
    const done = reading.catch(() => undefined); // a failed read-ahead is simply not shared
    this.#readingAhead = done;
    void done.finally(() => {
      this.#readingAhead = undefined;
    });
    this.offer(group, cursor, limit, reading);
  }

  /** Settles once no read-ahead is running (stop() waits for it before the pool may close). */
  async settled(): Promise<void> {
    while (this.#readingAhead) await this.#readingAhead;
  }

  /**
   * The part above `cursor` of a whole batch of `group` that holds `cursor + 1`, waiting up to
   * `waitMs` for a read still running that will hold it if whole, followed by the kept whole
   * batches read from where it ends, each from the end of the one before (up to `rows` events
   * in all); undefined when no batch holds `cursor + 1`.
   */
  async take(group: string, cursor: bigint, waitMs: number, rows: number): Promise<Segment[] | undefined> {
    const entries = this.#live(group);
    let first: Segment | undefined;
    for (const entry of [...entries].reverse()) {
      let batch = entry.done;
      if (!entry.settled) {
        if (!covers(entry, cursor)) continue;
        const settled = await settleWithin(entry.read, waitMs);
        batch = settled === TIMED_OUT ? undefined : settled;
      }
      if (!batch) continue;
      const start = Number(cursor - entry.from);
      if (start >= 0 && start < batch.events.length) {
        entry.atMs = performance.now();
        first = { batch, start, full: batch.events.length >= entry.limit };
        break;
      }
    }
    if (!first) return undefined;
    const segments = [first];
    let taken = first.batch.events.length - first.start;
    while (taken < rows) {
      const last = segments[segments.length - 1] as Segment;
      const end = (last.batch.events[last.batch.events.length - 1] as EventRecord).id;
      const next = this.#live(group).find((e) => e.from === end && e.done !== undefined);
      if (!next?.done) break;
      next.atMs = performance.now();
      segments.push({ batch: next.done, start: 0, full: next.done.events.length >= next.limit });
      taken += next.done.events.length;
    }
    return segments;
  }

  /** A read of `group` running or kept would hold `cursor + 1` if whole: no need to read for it. */
  covered(group: string, cursor: bigint): boolean {
    return this.#live(group).some((e) =>
      e.settled
        ? e.done !== undefined && cursor >= e.from && cursor - e.from < BigInt(e.done.events.length)
        : covers(e, cursor),
    );
  }

  /** Drops batches older than the maximum age, so a process that caught up holds none. */
  prune(): void {
    for (const group of [...this.#groups.keys()]) this.#live(group);
  }

  #live(group: string): Entry[] {
    const now = performance.now();
    const entries = (this.#groups.get(group) ?? []).filter((e) => now - e.atMs <= this.#maxAgeMs);
    if (entries.length === 0) this.#groups.delete(group);
    else this.#groups.set(group, entries);
    return entries;
  }
}

/** A read from `entry.from`, if whole, holds `cursor + 1`. */
function covers(entry: Entry, cursor: bigint): boolean {
  return cursor >= entry.from && cursor - entry.from < BigInt(entry.limit);
}

/**
 * A batch read above `cursor` that holds every id from cursor + 1 to its last one. It need not be
 * full: a lane takes it as partial (never as proof it has caught up), so what the log held above
 * its last id when it was read says nothing to the taker.
 */
function isWhole(cursor: bigint, events: readonly EventRecord[]): boolean {
  const last = events[events.length - 1];
  return last !== undefined && last.id - cursor === BigInt(events.length);
}

/**
 * The passed stub of a group batch's i-th event, made once for every lane that passes it: each of
 * the N lanes taking from a batch passes about N − 1 events for every one it keeps.
 */
function stubOf(batch: GroupBatch, i: number): EventRecord {
  let stubs = STUBS.get(batch);
  if (!stubs) {
    stubs = new Array<EventRecord | undefined>(batch.events.length);
    STUBS.set(batch, stubs);
  }
  let stub = stubs[i];
  if (!stub) {
    stub = passedStub((batch.events[i] as EventRecord).id);
    stubs[i] = stub;
  }
  return stub;
}

const STUBS = new WeakMap<GroupBatch, (EventRecord | undefined)[]>();

/** The events of a group batch from `start` on. */
export interface Segment {
  readonly batch: GroupBatch;
  readonly start: number;
  /** LIMIT cut the batch: the log goes on above it (a read-ahead may start there). */
  readonly full: boolean;
}

/**
 * One lane's batch from a group batch, from `start` on: its own events whole (of its lane and types),
 * the others passed (stubs), stopping before its (keptLimit + 1)-th own event. `partial`: ids above
 * the group batch were not examined (another turn's read, or one LIMIT cut), so the turn is not
 * complete however few events it holds.
 */
export function laneBatchOf(
  segments: readonly Segment[],
  filter: FetchFilter,
  partial: boolean,
): EventBatch & { readonly shared: boolean } {
  const events: EventRecord[] = [];
  let kept = 0;
  let cut = false;
  let xmin: bigint | undefined;
  const snapshots: Snapshot[] = [];
  let head = 0n;
  read: for (const { batch, start } of segments) {
    // The oldest snapshot's xmin: no transaction below it was still running when any was read.
    if (xmin === undefined || batch.xmin < xmin) xmin = batch.xmin;
    snapshots.push(...batch.snapshots);
    if (batch.head > head) head = batch.head;
    for (let i = start; i < batch.events.length; i++) {
      const event = batch.events[i] as EventRecord;
      const own =
        batch.lanes[i] === filter.laneIndex && (filter.types === null || filter.types.includes(event.type));
      if (own) {
        if (kept === filter.keptLimit) {
          cut = true;
          break read;
        }
        kept += 1;
        events.push(event);
      } else {
        events.push(stubOf(batch, i));
      }
    }
  }
  return { events, xmin: xmin ?? 0n, snapshots, head, cut, shared: partial };
}

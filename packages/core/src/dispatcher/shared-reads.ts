import type { EventRecord } from '../events.js';
import type { Snapshot } from '../gaps/gaps.js';
import { settleWithin, TIMED_OUT } from '../time-limit.js';

/** The events one fetch returned above a cursor. */
export interface EventBatch {
  /** Ascending ids, all above the cursor the batch was read from. */
  readonly events: readonly EventRecord[];
  /** pg_snapshot_xmin of the fetch statement (the oldest one's, when several statements read it). */
  readonly xmin: bigint;
  /** The snapshot of each statement that read it. */
  readonly snapshots: readonly Snapshot[];
  readonly head: bigint;
  /** A filtered fetch's kept events' keys (parking consumers only). */
  readonly keys?: ReadonlyMap<bigint, string>;
  /** A filtered fetch's kept events whose key was parked. */
  readonly parked?: ReadonlySet<bigint>;
  /** A filtered fetch stopped at the events it keeps: ids after its last one were not examined. */
  readonly cut?: boolean;
}

interface Entry {
  readonly read: Promise<EventBatch | undefined>;
  readonly atMs: number;
  /** Set once `read` has settled. */
  done?: { batch: EventBatch | undefined };
}

/**
 * Lets consumers of one dispatcher that take their turns from the same cursor read the events once:
 * ten consumers catching up together read each batch once, not ten times.
 *
 * A turn with no pending gap range fetches only `id > cursor`. Another consumer's turn that has
 * locked its row at that same cursor, also with no range, may deliver that fetch's rows instead of
 * its own, on two conditions:
 *   * the batch is full: a batch cut by LIMIT says nothing about the log head, so a stale one can
 *     never make a consumer believe it has caught up;
 *   * the batch has no hole: its ids are exactly cursor + 1 … cursor + n. Such a batch is what the
 *     taker's own fetch would return now (ids are unique, and nothing above a cursor is pruned), so
 *     taking it changes nothing the turn delivers or decides. A batch with a hole is not: an id in
 *     the hole may have committed since it was read, and the taker would then deliver it late, after
 *     higher ids, although it was visible before the turn began (docs/design.md §5.4: fetches after the lock).
 *
 * Events handed out here are the same objects for every consumer that takes them.
 */
export class SharedReads {
  readonly #entries = new Map<string, Entry>();
  readonly #maxEntries: number;
  readonly #maxAgeMs: number;
  #readingAhead: Promise<unknown> | undefined;

  constructor(maxEntries: number, maxAgeMs: number) {
    this.#maxEntries = maxEntries;
    this.#maxAgeMs = maxAgeMs;
  }

  /**
   * Registers a fetch of at most `limit` events above `cursor`, still running or done. Its batch is
   * kept for the takers only if it is full and has no hole (see above); a failed fetch is not.
   */
  offer(cursor: bigint, limit: number, read: Promise<EventBatch>): void {
    this.prune();
    const key = cursor.toString();
    this.#entries.delete(key); // re-inserted as the newest
    const shared = read.then(
      (batch) => (isShareable(cursor, limit, batch) ? batch : undefined),
      () => undefined,
    );
    const entry: Entry = { read: shared, atMs: performance.now() };
    void shared.then((batch) => {
      entry.done = { batch };
    });
    this.#entries.set(key, entry);
    for (const oldest of this.#entries.keys()) {
      if (this.#entries.size <= this.#maxEntries) break;
      this.#entries.delete(oldest);
    }
  }

  /**
   * Up to `limit` events of a full batch another turn read from `cursor`, waiting up to `waitMs`
   * for that fetch if it is still running; undefined when there is none (the caller fetches for
   * itself).
   */
  async take(cursor: bigint, limit: number, waitMs: number): Promise<EventBatch | undefined> {
    const entry = this.#fresh(cursor);
    if (!entry) return undefined;
    let batch = entry.done?.batch;
    if (!entry.done) {
      const settled = await settleWithin(entry.read, waitMs);
      batch = settled === TIMED_OUT ? undefined : settled;
    }
    if (!batch) return undefined;
    return batch.events.length > limit ? { ...batch, events: batch.events.slice(0, limit) } : batch;
  }

  /**
   * Starts `read`, a fetch of at most `limit` events above `cursor`, while the turn that read up to
   * `cursor` is still delivering: its consumer's next turn (or another consumer's) then finds the
   * batch instead of waiting for a fetch. One read-ahead at a time; none when `cursor` has an entry.
   */
  readAhead(cursor: bigint, limit: number, read: () => Promise<EventBatch>): void {
    if (this.#readingAhead || this.#entries.has(cursor.toString())) return;
    const reading = read();
    const done = reading.catch(() => undefined); // a failed read-ahead is simply not shared
    this.#readingAhead = done;
    void done.finally(() => {
      this.#readingAhead = undefined;
    });
    this.offer(cursor, limit, reading);
  }

  /** Whether a read from `cursor` is running or kept (younger than the maximum age). */
  has(cursor: bigint): boolean {
    return this.#fresh(cursor) !== undefined;
  }

  /** Settles once no read-ahead is running (stop() waits for it before the pool may close). */
  async settled(): Promise<void> {
    while (this.#readingAhead) await this.#readingAhead;
  }

  /** Drops entries older than the maximum age, so a dispatcher that caught up holds no batch. */
  prune(): void {
    const now = performance.now();
    for (const [key, entry] of this.#entries) {
      if (this.#expired(entry, now)) this.#entries.delete(key);
    }
  }

  /** The entry for `cursor`, unless it is older than the maximum age. */
  #fresh(cursor: bigint): Entry | undefined {
    const entry = this.#entries.get(cursor.toString());
    return entry && !this.#expired(entry, performance.now()) ? entry : undefined;
  }

  #expired(entry: Entry, now: number): boolean {
    return now - entry.atMs > this.#maxAgeMs;
  }

  get size(): number {
    return this.#entries.size;
  }
}

/**
 * Whether a batch read above `cursor` with `limit` may be shared: LIMIT cut it, and it holds every
 * id from `cursor` + 1 to its last one (ascending, unique ids).
 */
function isShareable(cursor: bigint, limit: number, batch: EventBatch): boolean {
  const last = batch.events[batch.events.length - 1];
  return (
    batch.events.length === limit && last !== undefined && last.id === cursor + BigInt(batch.events.length)
  );
}

// The chaos run's offline checker (docs/reliability.md §4): pure functions over the recorded histories.
//
// Ground truth of committed events is the final `select id from sluice.events`. Deliveries come
// from the dispatcher processes' JSONL files, commit acknowledgements from the writers' files, and
// cursor samples from the monitor. Every time is on clock.ts's clock (CLOCK_MONOTONIC, shared by
// all processes of the machine).
//
// I2, the order rule implemented here (per stream for a consumer run as lanes, which promises order
// per key only). Per consumer, deliveries are ordered by record time across
// processes (ties keep each process's own order). A first delivery of id g below the highest id
// already delivered is either
//   * an INVERSION: g was provably visible when a turn that delivered a higher id fetched its batch.
//     Proof: the writer's commit acknowledgement of g (taken after COMMIT returned, so after g became
//     visible) is earlier than the moment the dispatcher sent the lock statement of a turn that
//     delivered some h > g (the turn's fetch runs after that statement, in a later snapshot, and
//     fetches `ORDER BY id`, so it would have returned g before h). Strict consumers promise exact
//     id order: for them every such delivery is an inversion.
//   * LATE otherwise: g committed after (or too close to prove otherwise) that higher id's fetch —
//     the late-gap delivery docs/design.md §5.2 allows and counts.
// The rule never reports a false inversion; its blind spot is g committing within the few
// milliseconds between a turn's lock statement and its fetch, which it counts as late.
// Redeliveries (duplicates) are not order events: only first deliveries are classified, but every
// delivery (first or not) counts as a "higher id delivered by a turn".
import type { ConsumerCheck } from '../report/results.js';

export interface Delivery {
  /** Consumer name. */
  readonly c: string;
  readonly id: number;
  /** Process incarnation that delivered it. */
  readonly p: string;
  /** When the handler was called. */
  readonly t: number;
  /** When the delivering turn's lock statement was sent (lower bound of its fetch), when known. */
  readonly f?: number | undefined;
  /** The consumer row that delivered it: a lane's '*k/N' (lanes turn at once in one process). */
  readonly l?: string | undefined;
}

export interface Write {
  readonly w: string;
  readonly ids: readonly number[];
  readonly outcome: 'commit' | 'rollback' | 'unknown';
  /** When the outcome was known (after COMMIT returned, for commits). */
  readonly t: number;
  /** When append() returned the ids (they were drawn before), when known. */
  readonly a?: number | undefined;
}

/** An immediate shutdown of the server ({@link CheckInput.crashes}). */
export interface Crash {
  readonly quitAt: number;
  readonly acceptAt: number;
}

export interface CursorSample {
  readonly t: number;
  readonly consumer: string;
  readonly cursor: number;
}

export interface ConsumerInfo {
  readonly name: string;
  readonly ordering: 'fast' | 'strict';
  readonly transactional: boolean;
  /**
   * Runs as lanes (docs/design.md §11): order is promised per key (the event's stream), so the
   * order rule applies per stream, and its cursors are sampled per lane (`name@*k/N`).
   */
  readonly laned?: boolean;
}

export interface CheckInput {
  readonly consumers: readonly ConsumerInfo[];
  /** Ids in the events table at the end of the run. */
  readonly committedIds: readonly number[];
  /** Every delivery record; records of one process in that process's order. */
  readonly deliveries: readonly Delivery[];
  readonly writes: readonly Write[];
  readonly samples: readonly CursorSample[];
  /** chaos.deliveries ids of each transactional consumer. */
  readonly transactionalRows: ReadonlyMap<string, readonly number[]>;
  /** Only ids above this one are checked (a later phase of a run). @defaultValue 0 */
  readonly afterId?: number;
  /** Each committed id's stream (as a number), for the order of laned consumers. */
  readonly streamOf?: ReadonlyMap<number, number>;
  /**
   * When the server was crashed (an immediate shutdown): SIGQUIT sent, and the restarted server
   * accepting. PostgreSQL may then hand out again sequence values that only transactions which did
   * not commit had taken: their nextval's WAL record may not have been flushed, and the sequence
   * restarts from the last one that was. A rolled-back id drawn before such a crash that a write
   * drew again after it is that write's id from then on. @defaultValue []
   */
  readonly crashes?: readonly Crash[];
}

export interface Duplicate {
  readonly consumer: string;
  readonly id: number;
  /** The first delivery of the id. */
  readonly firstBy: string;
  readonly firstAt: number;
  /** Deliveries beyond the first. */
  readonly extra: number;
}

export interface OrderViolation {
  readonly consumer: string;
  readonly id: number;
  readonly by: string;
  readonly at: number;
  /** Highest id delivered before it. */
  readonly above: number;
  /** The writer's commit acknowledgement of the id (Infinity when unknown). */
  readonly committedBy: number;
  /** Latest lock statement of a turn that had delivered a higher id before. */
  readonly higherTurnLockedAt: number;
}

export interface CheckReport {
  readonly consumers: readonly ConsumerCheck[];
  readonly duplicates: readonly Duplicate[];
  /** Up to 20 per consumer, as evidence. */
  readonly inversions: readonly OrderViolation[];
  /** Up to 20 lost ids per consumer, as evidence. */
  readonly lostIds: Readonly<Record<string, readonly number[]>>;
  readonly phantomIds: Readonly<Record<string, readonly number[]>>;
  readonly events: { readonly appended: number; readonly committed: number; readonly aborted: number };
  /** Ids of 'commit' records: every one must exist. */
  readonly acked: {
    readonly total: number;
    readonly missing: number;
    readonly missingIds: readonly number[];
  };
  /** Ids of 'rollback' records that exist in the events table and no later write took again (must be 0). */
  readonly rolledBackPresent: number;
  /**
   * Deliveries of ids of 'rollback' records (G2: must be 0); of an id a write took again after a
   * crash, the deliveries before that crash.
   */
  readonly rolledBackDelivered: number;
  readonly rolledBackIds: number;
  /** Rolled-back ids that a write took again after a crash ({@link CheckInput.crashes}). */
  readonly reissuedIds: number;
  readonly unknown: { readonly ids: number; readonly committed: number };
  /** Committed ids no writer recorded (a writer died before recording; 0 in a run that kills none). */
  readonly withoutWriteRecord: number;
  readonly transactional: readonly {
    readonly consumer: string;
    readonly missing: number;
    readonly extra: number;
  }[];
}

/** Largest id the dense arrays below accept (memory: ~30 bytes per id per consumer pass). */
const MAX_DENSE_ID = 50_000_000;

/** Prefix-max Fenwick tree over positions 1..n. */
class MaxFenwick {
  readonly #tree: Float64Array;
  readonly size: number;

  constructor(size: number) {
    this.size = size;
    this.#tree = new Float64Array(size + 1).fill(-Infinity);
  }

  update(position: number, value: number): void {
    for (let i = position; i <= this.size; i += i & -i)
      if ((this.#tree[i] ?? Infinity) < value) this.#tree[i] = value;
  }

  /** Max over positions 1..position. */
  query(position: number): number {
    let max = -Infinity;
    for (let i = position; i > 0; i -= i & -i) max = Math.max(max, this.#tree[i] ?? -Infinity);
    return max;
  }
}

function checkId(id: number, where: string): void {
  if (!Number.isSafeInteger(id) || id < 1 || id > MAX_DENSE_ID)
    throw new Error(`${where}: id ${id} out of range`);
}

export function check(input: CheckInput): CheckReport {
  const afterId = input.afterId ?? 0;
  let maxId = 0;
  for (const id of input.committedIds) {
    checkId(id, 'committed');
    if (id > maxId) maxId = id;
  }
  for (const w of input.writes)
    for (const id of w.ids) {
      checkId(id, `write ${w.w}`);
      if (id > maxId) maxId = id;
    }
  for (const d of input.deliveries) {
    checkId(d.id, `delivery ${d.p}`);
    if (d.id > maxId) maxId = d.id;
  }
  const inScope = (id: number) => id > afterId;

  const committed = new Uint8Array(maxId + 1);
  for (const id of input.committedIds) committed[id] = 1;
  // The writer's acknowledgement time: after the id became visible, if it committed.
  const committedBy = new Float64Array(maxId + 1).fill(Infinity);
  const recorded = new Uint8Array(maxId + 1);
  const rolledBack = new Uint8Array(maxId + 1);
  let appended = 0;
  let aborted = 0;
  let ackedTotal = 0;
  const ackedMissingIds: number[] = [];
  let ackedMissing = 0;
  let rolledBackPresent = 0;
  let rolledBackIds = 0;
  let unknownIds = 0;
  let unknownCommitted = 0;
  // An id a rolled-back write and a later write (commit or unknown) both recorded: the sequence
  // handed it out again after a crash between them. Its deliveries after that crash are the later
  // write's event.
  const reissuedAfter = reissues(input.writes, input.crashes ?? []);
  for (const w of input.writes) {
    for (const id of w.ids) {
      if (!inScope(id)) continue;
      appended += 1;
      recorded[id] = 1;
      if (!committed[id]) aborted += 1;
      if (w.outcome === 'rollback') {
        rolledBack[id] = 1;
        rolledBackIds += 1;
        if (committed[id] && !reissuedAfter.has(id)) rolledBackPresent += 1;
        continue;
      }
      if (w.t < (committedBy[id] ?? Infinity)) committedBy[id] = w.t;
      if (w.outcome === 'commit') {
        ackedTotal += 1;
        if (!committed[id]) {
          ackedMissing += 1;
          if (ackedMissingIds.length < 20) ackedMissingIds.push(id);
        }
      } else {
        unknownIds += 1;
        if (committed[id]) unknownCommitted += 1;
      }
    }
  }
  let committedCount = 0;
  let withoutWriteRecord = 0;
  for (const id of input.committedIds) {
    if (!inScope(id)) continue;
    committedCount += 1;
    if (!recorded[id]) withoutWriteRecord += 1;
  }

  // Each committed id's rank (1…) among its stream's ids, and each stream's size: the order of a
  // laned consumer is checked per stream.
  const streams = { rank: new Int32Array(maxId + 1), size: new Map<number, number>() };
  if (input.consumers.some((c) => c.laned === true)) {
    for (const id of [...input.committedIds].sort((a, b) => a - b)) {
      const stream = input.streamOf?.get(id) ?? -1;
      const size = (streams.size.get(stream) ?? 0) + 1;
      streams.size.set(stream, size);
      streams.rank[id] = size;
    }
  }

  // Deliveries per consumer, in record-time order (stable: ties keep the process's order).
  const byConsumer = new Map<string, Delivery[]>(input.consumers.map((c) => [c.name, []]));
  for (const d of input.deliveries) {
    const list = byConsumer.get(d.c);
    if (!list) throw new Error(`delivery to unknown consumer ${d.c}`);
    list.push(d);
  }
  const samplesByConsumer = new Map<string, CursorSample[]>();
  for (const s of input.samples) {
    // A lane's samples (`name@*k/N`) are a series of their own, checked with their consumer.
    let list = samplesByConsumer.get(s.consumer);
    if (!list) samplesByConsumer.set(s.consumer, (list = []));
    list.push(s);
  }
  const seriesOf = (consumer: ConsumerInfo): CursorSample[][] =>
    [...samplesByConsumer]
      .filter(
        ([name]) =>
          name === consumer.name || (consumer.laned === true && name.startsWith(`${consumer.name}@`)),
      )
      .map(([, list]) => list);

  const count = new Uint32Array(maxId + 1);
  const firstAt = new Float64Array(maxId + 1);
  const firstBy = new Array<string>(maxId + 1);
  const checks: ConsumerCheck[] = [];
  const duplicates: Duplicate[] = [];
  const inversions: OrderViolation[] = [];
  const lostIds: Record<string, number[]> = {};
  const phantomIds: Record<string, number[]> = {};
  let rolledBackDelivered = 0;
  for (const consumer of input.consumers) {
    const deliveries = (byConsumer.get(consumer.name) ?? []).slice().sort((a, b) => a.t - b.t);
    count.fill(0);
    // Position of id i is maxId - i + 1, so "ids above g" is the prefix 1..maxId - g.
    const turns = new MaxFenwick(maxId);
    let duplicated = 0;
    let late = 0;
    let inverted = 0;
    let phantoms = 0;
    let highest = 0;
    const phantomList: number[] = [];
    // A laned consumer's order is per stream: the highest id of each, and the lock times of the
    // turns that delivered its ids (a prefix-max tree over the stream's ids, highest first).
    const perStream = consumer.laned ? new Map<number, { highest: number; turns: MaxFenwick }>() : null;
    for (const d of deliveries) {
      if (!inScope(d.id)) continue;
      if (rolledBack[d.id]) {
        // Of an id drawn again after a crash, a delivery fetched before it (or, without the fetch's
        // time, called before the server accepted again) was of the rolled-back event.
        const crash = reissuedAfter.get(d.id);
        const later = crash !== undefined && (d.f !== undefined ? d.f > crash.quitAt : d.t > crash.acceptAt);
        if (!later) {
          rolledBackDelivered += 1;
          // Not a delivery of the later write's event: that one may be lost.
          if (committed[d.id]) continue;
        }
      }
      const n = (count[d.id] ?? 0) + 1;
      count[d.id] = n;
      if (n === 1) {
        firstAt[d.id] = d.t;
        firstBy[d.id] = d.p;
      }
      if (!committed[d.id]) {
        if (n === 1) {
          phantoms += 1;
          if (phantomList.length < 20) phantomList.push(d.id);
        }
        continue;
      }
      if (n > 1) duplicated += 1;
      else if (perStream) {
        const stream = input.streamOf?.get(d.id) ?? -1;
        let seen = perStream.get(stream);
        if (!seen)
          perStream.set(
            stream,
            (seen = { highest: 0, turns: new MaxFenwick(streams.size.get(stream) ?? 1) }),
          );
        if (d.id < seen.highest) {
          // Inverted within its stream only if it was provably visible when a turn of its stream's
          // lane fetched a higher id of the stream.
          const higherTurnLockedAt = seen.turns.query(seen.turns.size - (streams.rank[d.id] ?? 0));
          const committedAt = committedBy[d.id] ?? Infinity;
          if (consumer.ordering === 'strict' || committedAt < higherTurnLockedAt) {
            inverted += 1;
            if (inversions.filter((v) => v.consumer === consumer.name).length < 20) {
              inversions.push({
                consumer: consumer.name,
                id: d.id,
                by: d.p,
                at: d.t,
                above: seen.highest,
                committedBy: committedAt,
                higherTurnLockedAt,
              });
            }
          } else late += 1;
        }
      } else if (d.id < highest) {
        const higherTurnLockedAt = turns.query(maxId - d.id);
        const committedAt = committedBy[d.id] ?? Infinity;
        const provablyVisible = committedAt < higherTurnLockedAt;
        if (consumer.ordering === 'strict' || provablyVisible) {
          inverted += 1;
          if (inversions.filter((v) => v.consumer === consumer.name).length < 20) {
            inversions.push({
              consumer: consumer.name,
              id: d.id,
              by: d.p,
              at: d.t,
              above: highest,
              committedBy: committedAt,
              higherTurnLockedAt,
            });
          }
        } else late += 1;
      }
      if (d.id > highest) highest = d.id;
      if (d.f !== undefined) turns.update(maxId - d.id + 1, d.f);
      if (perStream && committed[d.id]) {
        const seen = perStream.get(input.streamOf?.get(d.id) ?? -1);
        if (seen) {
          if (d.id > seen.highest) seen.highest = d.id;
          if (d.f !== undefined) seen.turns.update(seen.turns.size - (streams.rank[d.id] ?? 1) + 1, d.f);
        }
      }
    }
    let lost = 0;
    const lostList: number[] = [];
    for (const id of input.committedIds) {
      if (!inScope(id) || (count[id] ?? 0) > 0) continue;
      lost += 1;
      if (lostList.length < 20) lostList.push(id);
    }
    for (let id = afterId + 1; id <= maxId; id++) {
      const n = count[id] ?? 0;
      if (n > 1 && committed[id]) {
        duplicates.push({
          consumer: consumer.name,
          id,
          firstBy: firstBy[id] ?? '?',
          firstAt: firstAt[id] ?? NaN,
          extra: n - 1,
        });
      }
    }
    let cursorRegressions = 0;
    for (const series of seriesOf(consumer)) {
      let previous: number | undefined;
      for (const s of series) {
        if (previous !== undefined && s.cursor < previous) cursorRegressions += 1;
        previous = s.cursor;
      }
    }
    if (lostList.length > 0) lostIds[consumer.name] = lostList;
    if (phantomList.length > 0) phantomIds[consumer.name] = phantomList;
    checks.push({
      consumer: consumer.name,
      lost,
      duplicated,
      late,
      inversions: inverted,
      cursorRegressions,
      phantoms,
    });
  }

  const transactional = input.consumers
    .filter((c) => c.transactional)
    .map((c) => {
      const rows = new Uint8Array(maxId + 1);
      let extra = 0;
      for (const id of input.transactionalRows.get(c.name) ?? []) {
        if (!inScope(id)) continue;
        if (id > maxId || !committed[id] || rows[id]) extra += 1;
        else rows[id] = 1;
      }
      let missing = 0;
      for (const id of input.committedIds) if (inScope(id) && !rows[id]) missing += 1;
      return { consumer: c.name, missing, extra };
    });

  return {
    consumers: checks,
    duplicates,
    inversions,
    lostIds,
    phantomIds,
    events: { appended, committed: committedCount, aborted },
    acked: { total: ackedTotal, missing: ackedMissing, missingIds: ackedMissingIds },
    rolledBackPresent,
    rolledBackDelivered,
    rolledBackIds,
    reissuedIds: reissuedAfter.size,
    unknown: { ids: unknownIds, committed: unknownCommitted },
    withoutWriteRecord,
    transactional,
  };
}

/**
 * The rolled-back ids that a write drew again after a crash, each with the first such crash: only
 * a crash between the two draws lets the sequence hand out a value twice, and only a value of a
 * transaction that did not commit. A draw's time is when append() returned, or the outcome's when
 * the write did not record it (an upper bound either way).
 */
function reissues(writes: readonly Write[], crashes: readonly Crash[]): Map<number, Crash> {
  const reissued = new Map<number, Crash>();
  if (crashes.length === 0) return reissued;
  const rolledBackDrawn = new Map<number, number>();
  for (const w of writes) {
    if (w.outcome !== 'rollback') continue;
    for (const id of w.ids)
      rolledBackDrawn.set(id, Math.min(w.a ?? w.t, rolledBackDrawn.get(id) ?? Infinity));
  }
  for (const w of writes) {
    if (w.outcome === 'rollback') continue;
    for (const id of w.ids) {
      const drawn = rolledBackDrawn.get(id);
      if (drawn === undefined) continue;
      // The later write drew after the crash (its draw is after its statement went to the new server).
      const crash = crashes.find((c) => drawn < c.quitAt && c.quitAt < (w.a ?? w.t));
      if (crash && crash.quitAt < (reissued.get(id)?.quitAt ?? Infinity)) reissued.set(id, crash);
    }
  }
  return reissued;
}

/**
 * For each fault time: milliseconds until the next delivery (any consumer, any process) of an event
 * whose commit was acknowledged after the fault — the system delivering new work again. With
 * `anyEvent`, the next delivery of any event at all. NaN when nothing was delivered afterwards.
 */
export function recoveryTimes(
  faults: readonly number[],
  deliveries: readonly Delivery[],
  writes: readonly Write[],
  options: { anyEvent?: boolean } = {},
): number[] {
  const committedBy = new Map<number, number>();
  if (!options.anyEvent) {
    for (const w of writes) {
      if (w.outcome === 'rollback') continue;
      for (const id of w.ids) committedBy.set(id, Math.min(w.t, committedBy.get(id) ?? Infinity));
    }
  }
  const best = faults.map(() => Infinity);
  for (const d of deliveries) {
    const ackedAt = options.anyEvent ? Infinity : (committedBy.get(d.id) ?? -Infinity);
    faults.forEach((fault, i) => {
      if (d.t > fault && ackedAt > fault && d.t - fault < (best[i] ?? Infinity)) best[i] = d.t - fault;
    });
  }
  return best.map((ms) => (ms === Infinity ? NaN : ms));
}

/** The q-quantile (0..1) of the finite values, nearest rank; NaN when there are none. */
export function quantile(values: readonly number[], q: number): number {
  const sorted = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] ?? NaN;
}

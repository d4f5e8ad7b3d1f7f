// The steps of a turn (dispatcher/turn.ts), each carrying out what the consumer's state machine
// (consumer-state/consumer-state.ts) decided: the lock with the early fetch behind it and the batch
// the turn delivers from; the turn start recorded before the delivery (crash accounting), the
// handler calls, the replays an operator asked for and what is recorded of them; and what the
// turn writes (the status it opens with, the ranges, the row it ends with, a cluster change).
import { assertLive } from '../connections/guarded-transaction.js';
import type { Span } from '@opentelemetry/api';
import type {
  ConsumerState,
  Delivered,
  DeliveryPlan,
  LaneChange,
  Opening,
  StartInFlight,
  TurnClose,
  TurnRules,
} from '../consumer-state/consumer-state.js';
import { messageOf } from '../errors.js';
import { PASSED_TYPE, type EventRecord } from '../events.js';
import { type GapRange, type Settlement, type TurnInput, parseSnapshot, passedRanges } from '../gaps/gaps.js';
import { MAX_MS, type ResolvedConsumer, type ResolvedOptions } from '../options.js';
import { writeAudit } from '../queries/audit.js';
import { lockConsumer, type LockedRow, saveTurn, setStatus } from '../queries/consumers.js';
import { recordDeadLetters } from '../queries/dead-letters.js';
import { raiseBarrier, rangesUpToBarrier, retireLane, trySwitchLanes } from '../queries/lanes.js';
import { finishParkedReplay, recordParked, selectParkedReplays } from '../queries/parked.js';
import type { Lane } from '../lanes/lanes.js';
import {
  fetchBatch,
  fetchFilteredBatch,
  type FetchedBatch,
  type FetchFilter,
  type LaneGroup,
} from '../queries/events.js';
import { replaceRanges, type StoredRange } from '../queries/gaps.js';
import { claimReplays, finishReplays, selectRequestedReplays, type ReplayClaim } from '../queries/replays.js';
import { finishTurnStart, recordTurnStart } from '../queries/turn-starts.js';
import type { Tables } from '../schema/tables.js';
import type { Sql, TransactionSql } from '../sql-types.js';
import { ATTR } from '../telemetry/attributes.js';
import {
  deliver,
  MAX_PARKED_KEY_BYTES,
  NOT_PARKED_UNDER_ANOTHER_KEY,
  type DeliveryResult,
  type Parking,
} from './deliver.js';
import { laneBatchOf, type GroupBatch, type LaneReads, type Segment } from './lane-reads.js';
import type { EventBatch, SharedReads } from './shared-reads.js';
import type { TurnEnvironment, TurnProgress } from './turn.js';

// ---- the fetch --------------------------------------------------------------------------------

/**
 * Sends the lock and the read of everything the turn decides on (see lockConsumer), then the fetch
 * for the cursor this turn expects (the pre-check's, or its previous turn's): one round trip. The
 * early fetch is used only if the locked row has that cursor and nothing that changes what the
 * turn fetches; it is not sent when another turn's read of that cursor is there to take, and is
 * offered to the other consumers' turns at once.
 */
export function lockWithEarlyFetch(
  env: TurnEnvironment,
  consumer: ResolvedConsumer,
  tx: TransactionSql,
  limit: number,
  expectedCursor: bigint | undefined,
): { row: Promise<LockedRow | undefined>; early: EarlyFetch | undefined } {
  const { options, tables: t } = env;
  const lock = lockConsumer(tx, t, consumer.name, consumer.instanceId, {
    statementTimeoutMs: options.statementTimeoutMs,
    // Between a turn's statements: handler calls without one (not transactional) follow each other
    // until maxTurnMs, and the last may run its whole handlerTimeoutMs; then the turn's writes.
    idleInTransactionTimeoutMs: Math.min(
      MAX_MS,
      options.maxTurnMs + consumer.handlerTimeoutMs + options.statementTimeoutMs,
    ),
  });
  lock.row.catch(() => undefined);
  // Sent before the row (and a change of lanes in progress) is known: the filter without a cap.
  // The turn uses it only when the row says nothing that changes the fetch (see turn.ts).
  const filter = fetchFilterOf(consumer, null, limit);
  const group = laneGroupOf(env, consumer, filter);
  if (group) {
    // A lane's early fetch is a group read, offered to the other lanes at once; none when a read
    // this process has running or kept will hold the lane's next events.
    const early =
      expectedCursor === undefined || group.reads.covered(group.name, expectedCursor)
        ? undefined
        : readGroup(tx, t, expectedCursor, limit, group);
    early?.catch(() => undefined);
    return { row: lock.row, early: early && { group: early } };
  }
  const early =
    expectedCursor === undefined || (filter === undefined && env.reads?.has(expectedCursor))
      ? undefined
      : readFrom(
          tx,
          t,
          expectedCursor,
          [],
          limit,
          filter === undefined ? env.reads : undefined,
          undefined,
          filter,
        );
  early?.catch(() => undefined); // fails with the lock, whose failure the turn reports
  return { row: lock.row, early: early && { batch: early } };
}

/** The fetch sent behind the lock: a consumer's own, or a lane's group read (docs/design.md §11.2). */
export type EarlyFetch =
  | { readonly batch: Promise<EventBatch>; readonly group?: undefined }
  | { readonly group: Promise<Segment>; readonly batch?: undefined };

/** A fetched batch, and whether it is another turn's full read (then nothing beyond it was examined). */
export interface TurnBatch extends EventBatch {
  readonly shared: boolean;
}

/**
 * The turn's fetch (one statement, one snapshot: docs/design.md §5): the early fetch sent behind
 * the lock when it read this cursor, or a batch another turn read from it (plain turns only), or a
 * fetch of its own with the ranges to re-fetch and the stragglers due. A batch that came back full
 * starts the read of the next one (catching up: read while this one is delivered and committed).
 */
export async function fetchTurnBatch(
  env: TurnEnvironment,
  consumer: ResolvedConsumer,
  tx: TransactionSql,
  turn: {
    readonly cursor: bigint;
    readonly limit: number;
    readonly rechecked: readonly GapRange[];
    readonly stragglers: StartInFlight | undefined;
    readonly plain: boolean;
    readonly early: EarlyFetch | undefined;
    /** A filtered consumer's fetch (docs/design.md §11): never shared with other consumers. */
    readonly filter: FetchFilter | undefined;
  },
): Promise<TurnBatch> {
  const { options, tables: t } = env;
  const { cursor, limit, filter } = turn;
  const group = turn.plain ? laneGroupOf(env, consumer, filter) : undefined;
  if (group && filter) {
    // A lane's plain turn: its early group read, another lane's read that holds its cursor, or a
    // group read of its own offered to the other lanes (docs/design.md §11.2).
    const early = turn.early?.group ? await turn.early.group : undefined;
    const taken = early
      ? undefined
      : await group.reads.take(group.name, cursor, options.statementTimeoutMs, limit);
    let read = taken ?? [early ?? (await readGroup(tx, t, cursor, limit, group))];
    let last = read[read.length - 1] as Segment;
    let end = last.batch.events[last.batch.events.length - 1];
    if (taken && !last.full && end && !laneBatchOf(taken, filter, true).cut) {
      // Taken up to where the log ended when it was read: the rest is read now, after the lock,
      // so that the turn knows whether the lane has caught up.
      read = [...taken, await readGroup(tx, t, end.id, limit, group)];
      last = read[read.length - 1] as Segment;
      end = last.batch.events[last.batch.events.length - 1] ?? end;
    }
    if (last.full && end && env.readAhead !== undefined) {
      // Catching up: the next batch is read while the lanes take from this one (as the plain
      // read-ahead, only while a turn slot is free: it takes a pool connection beyond the turns').
      const size = Math.min(limit, GROUP_READ_MAX);
      group.reads.readAhead(group.name, end.id, size, () =>
        groupBatchOf(options.sql, t, end.id, size, group),
      );
    }
    // Complete only when the turn's last read is its own and LIMIT did not cut it.
    const ownLast = early !== undefined || taken === undefined || read.length > taken.length;
    return laneBatchOf(read, filter, !ownLast || last.full);
  }
  const reads = turn.plain && filter === undefined ? env.reads : undefined;
  const early = turn.plain ? turn.early?.batch : undefined;
  const shared = reads && !early ? await reads.take(cursor, limit, options.statementTimeoutMs) : undefined;
  const batch =
    shared ??
    (await (early ??
      readFrom(
        tx,
        t,
        cursor,
        // Strict ordering re-reads only ranges behind its cursor (left by fast ordering): the
        // ranges ahead of it are read as part of the log above the cursor.
        passedRanges({ cursor, rechecked: turn.rechecked, ordering: consumer.ordering }),
        limit,
        reads,
        turn.stragglers,
        filter,
      )));
  const last = batch.events[batch.events.length - 1];
  const aheadLimit = env.readAhead;
  if (reads && aheadLimit !== undefined && last && batch.events.length === limit) {
    reads.readAhead(last.id, aheadLimit, () => readBatch(options.sql, t, last.id, aheadLimit));
  }
  return { ...batch, shared: shared !== undefined };
}

/**
 * The turn's fetch statement, started at once. With `reads`, it is offered to the other
 * consumers' turns from the same cursor while it runs, and kept for them if LIMIT cut it.
 */
export function readFrom(
  tx: TransactionSql,
  t: Tables,
  cursor: bigint,
  ranges: readonly GapRange[],
  limit: number,
  reads: SharedReads | undefined,
  stragglers?: StartInFlight,
  filter?: FetchFilter,
): Promise<EventBatch> {
  const bounds = { from: ranges.map((r) => r.from), to: ranges.map((r) => r.to) };
  if (filter !== undefined) {
    return fetchFilteredBatch(tx, t, cursor, bounds, limit, filter, stragglers).then((fetched) => ({
      ...batchOf(fetched),
      keys: fetched.keys,
      parked: fetched.parked,
      cut: fetched.cut,
    }));
  }
  const reading = fetchBatch(tx, t, cursor, bounds, limit, stragglers).then(batchOf);
  reads?.offer(cursor, limit, reading);
  return reading;
}

/** The lanes of one consumer and lane count whose plain turns share group reads in this process. */
interface LaneGroupReads extends LaneGroup {
  readonly name: string;
  readonly reads: LaneReads;
}

/**
 * Whether a lane's plain turn reads the log as a group read shared with the consumer's other lanes
 * (docs/design.md §11.2): a lane of two or more, not parking (a parked key is read with the fetch),
 * not draining to a change of lanes (capped).
 */
function laneGroupOf(
  env: TurnEnvironment,
  consumer: ResolvedConsumer,
  filter: FetchFilter | undefined,
): LaneGroupReads | undefined {
  if (!env.laneReads || !filter || filter.laneCount < 2 || filter.parking || filter.cap !== null)
    return undefined;
  return {
    name: `${consumer.name}\u0000${filter.laneCount}`,
    key: filter.key,
    count: filter.laneCount,
    reads: env.laneReads,
  };
}

/**
 * A group read above `cursor` in the turn's transaction, offered to the other lanes while it runs.
 * Its segment is `full` when LIMIT cut it: nothing above its last event was examined.
 */
async function readGroup(
  tx: TransactionSql,
  t: Tables,
  cursor: bigint,
  limit: number,
  group: LaneGroupReads,
): Promise<Segment> {
  const size = Math.min(limit, GROUP_READ_MAX);
  const reading = groupBatchOf(tx, t, cursor, size, group);
  group.reads.offer(group.name, cursor, size, reading);
  const batch = await reading;
  return { batch, start: 0, full: batch.events.length >= size };
}

/** Every event above `cursor` (at most `size`), each with its lane of the group's count. */
async function groupBatchOf(
  sql: TransactionSql | Sql,
  t: Tables,
  cursor: bigint,
  size: number,
  group: LaneGroup,
): Promise<GroupBatch> {
  const fetched = await fetchBatch(sql, t, cursor, { from: [], to: [] }, size, undefined, group);
  return { ...batchOf(fetched), lanes: fetched.lanes ?? new Int16Array(fetched.events.length) };
}

/**
 * Most events one group read holds: a lane whose turn reaches its end goes on from the next one
 * (read once for the lanes again), so a read is never much larger than what the lanes of one
 * process take from it before it is let go. With N lanes a lane finds about this ÷ N of its own
 * events in one read, so the size also bounds how much a lane's turn (its lock, row update and
 * commit) delivers while catching up (docs/design.md §11.2).
 */
const GROUP_READ_MAX = 16_384;

/**
 * The parked keys for the delivery (docs/design.md §11.4): the keys its fetch found parked, and
 * each kept event's key. For a parking consumer, and for any consumer whose fetch read parked keys
 * (some were parked: fetchFilterOf); only a parking one parks more.
 */
export function parkingOf(
  consumer: ResolvedConsumer,
  batch: EventBatch,
  underAnotherKey: boolean,
): Parking | undefined {
  if (!consumer.parkKey && batch.parked === undefined) return undefined;
  const keys = batch.keys ?? new Map<bigint, string>();
  const parked = new Set<string>();
  for (const id of batch.parked ?? []) {
    const key = keys.get(id);
    if (key !== undefined) parked.add(key);
  }
  return { keyOf: (event) => keys.get(event.id), keys: parked, underAnotherKey };
}

/**
 * The lane that replays parked keys now, if this row is one: keys belong to the lanes of the
 * consumer's current lane count, the old one until a change switches over, the new one after.
 */
export function parkedReplayLane(consumer: ResolvedConsumer, change: LaneChange | null): Lane | null {
  const lane = consumer.lane;
  if (lane === null) return { index: 0, count: 1 };
  if (change === null) return lane;
  const current = change.switched ? change.to : change.from;
  return lane.count === current ? lane : null;
}

/**
 * What a consumer's fetch keeps (docs/design.md §11): one lane's events, the handled types, parked
 * keys; an old lane of a change of lane count reads nothing above its barrier but, before the
 * switch, the event its row still has to resolve (`unresolved`: unresolvedEventOf), whose delivery
 * or skip then raises the barrier. Undefined for a
 * consumer that keeps every event (the plain fetch). Parked keys are read by a parking consumer,
 * and by any other once the held row says some are parked (`parkedKeys`): a process of a rolling
 * deployment without errorPolicy.parkKey still sets aside the later events of a key another one
 * parked, rather than deliver them before the parked ones.
 */
export function fetchFilterOf(
  consumer: ResolvedConsumer,
  change: LaneChange | null,
  limit: number,
  parkedKeys = false,
  unresolved: bigint | null = null,
): FetchFilter | undefined {
  const lane = consumer.lane ?? { index: 0, count: 1 };
  let cap = consumer.lane !== null && change !== null && lane.count === change.from ? change.barrier : null;
  if (cap !== null && !change?.switched && unresolved !== null && unresolved > cap) cap = unresolved;
  const parking = consumer.parkKey || parkedKeys;
  if (lane.count === 1 && consumer.types === null && !parking && cap === null) return undefined;
  return {
    consumer: consumer.name,
    laneIndex: lane.index,
    laneCount: lane.count,
    key: consumer.laneKey,
    types: consumer.types,
    parking,
    cap,
    // A lane reads about `count` events for each of its own: its turn hands at most limit / count
    // of them to the handler (the batch a lane's crash can redeliver).
    keptLimit: Math.max(1, Math.ceil(limit / lane.count)),
  };
}

/** The events above `cursor` read by one autocommit statement of the pool. */
async function readBatch(sql: Sql, t: Tables, cursor: bigint, limit: number): Promise<EventBatch> {
  return batchOf(await fetchBatch(sql, t, cursor, { from: [], to: [] }, limit));
}

function batchOf(fetched: FetchedBatch): EventBatch {
  const snapshot = parseSnapshot(fetched.snapshot);
  return { events: fetched.events, xmin: snapshot.xmin, snapshots: [snapshot], head: BigInt(fetched.head) };
}

const MAX_XID = 2n ** 63n - 1n;

/**
 * The gap logic's view of what the turn fetched, and the fetched events by id: every event but the
 * passed ones (another lane's, a type not handled), which are ids alone (see passedOf).
 */
export function turnInputOf(
  batch: TurnBatch,
  opening: Extract<Opening, { kind: 'open' }>,
  rechecked: readonly GapRange[],
  consumer: ResolvedConsumer,
  limit: number,
): { input: TurnInput; events: Map<bigint, EventRecord> } {
  const events = new Map<bigint, EventRecord>();
  const ids: bigint[] = [];
  // Ascending (every fetch orders its batch): an id read twice (a re-fetched range and a
  // straggler) is one.
  for (const event of batch.events) {
    if (ids.length > 0 && ids[ids.length - 1] === event.id) continue;
    ids.push(event.id);
    if (event.type !== PASSED_TYPE) events.set(event.id, event);
  }
  const input: TurnInput = {
    cursor: opening.state.cursor,
    rechecked,
    fetch: {
      ids,
      // A shared batch is a full one; a filtered one cut at the events it keeps is not complete.
      complete: !batch.shared && batch.cut !== true && ids.length < limit,
      // After a restore onto another cluster, no transaction of the old one can still commit.
      xmin: opening.clusterChanged ? MAX_XID : batch.xmin,
    },
    ordering: consumer.ordering,
    ...(opening.stragglers ? { stragglersUpTo: opening.stragglers.upto } : {}),
  };
  return { input, events };
}

// ---- the delivery -------------------------------------------------------------------------------

/** What the state machine needs to know of a delivery. */
export function deliveredOf(result: DeliveryResult, resolvedIds: readonly bigint[]): Delivered {
  const failure = result.failure && {
    eventId: result.failure.event.id,
    attempts: result.failure.attempts,
    message: messageOf(result.failure.error),
  };
  return { resolvedIds, failure, dead: result.dead };
}

/**
 * The process died maxAttempts times on `event` (the plan's first): it is not handed to the
 * handler again. It goes to the dead letters with skipApplyErrors; otherwise the consumer is dead.
 */
export function crashedOut(
  consumer: ResolvedConsumer,
  plan: DeliveryPlan,
  event: EventRecord,
  parking: Parking | undefined,
): DeliveryResult {
  const key = parking?.keyOf(event);
  if (key !== undefined && parking?.keys.has(key) === true) {
    // Its key is parked (maybe by another process): it never reaches the handler, so the crashes
    // were not its own. It is set aside as every event of the key is, in order.
    return {
      resolved: [event],
      deadLetters: [],
      parked: [{ event, key, error: null, attempts: 0 }],
      failure: undefined,
      dead: false,
      handled: 0,
      failed: 0,
    };
  }
  const message = `the process stopped ${plan.crashes} time(s) while event ${event.id} was being handled`;
  const attempts = plan.priorAttempts(event.id);
  // As a failed attempt would (deliver.ts): a key longer than an operator can name is not parked,
  // nor one this process computes under another key than the recorded one.
  if (
    consumer.parkKey &&
    parking?.underAnotherKey !== true &&
    key !== undefined &&
    Buffer.byteLength(key) <= MAX_PARKED_KEY_BYTES
  ) {
    return {
      resolved: [event],
      deadLetters: [],
      parked: [{ event, key, error: message, attempts }],
      failure: undefined,
      dead: false,
      handled: 0,
      failed: 1,
    };
  }
  if (consumer.parkKey && parking?.underAnotherKey === true && key !== undefined) {
    // Not ended for every deployment: it waits for a process of the recorded key, whose turn
    // parks it without another call (the crashes stay charged to it).
    return {
      resolved: [],
      deadLetters: [],
      parked: [],
      failure: { event, error: new Error(`${message} (${NOT_PARKED_UNDER_ANOTHER_KEY})`), attempts },
      dead: false,
      handled: 0,
      failed: 1,
    };
  }
  return consumer.skipApplyErrors
    ? {
        resolved: [event],
        parked: [],
        failure: undefined,
        dead: false,
        handled: 0,
        failed: 1,
        deadLetters: [{ event, reason: 'apply-error', error: message, attempts }],
      }
    : {
        resolved: [],
        deadLetters: [],
        parked: [],
        failure: { event, error: new Error(message), attempts },
        dead: true,
        handled: 0,
        failed: 1,
      };
}

/**
 * Records the turn start in a committed statement of its own (crash accounting), then delivers.
 * Without countCrashedAttempts, with nothing to deliver, or when this process has a clean view of
 * the consumer (`record` false: see cleanViewOf), it only delivers.
 */
export async function startAndDeliver(
  env: TurnEnvironment,
  consumer: ResolvedConsumer,
  tx: TransactionSql,
  span: Span,
  plan: DeliveryPlan,
  events: readonly EventRecord[],
  unhandled: (id: bigint) => boolean,
  progress: TurnProgress,
  start: { readonly record: boolean; readonly parking?: Parking },
): Promise<DeliveryResult> {
  const { options, tables: t } = env;
  const first = events[0];
  const last = events[events.length - 1];
  // A batch with nothing for the handler (another lane's events, parked keys) records no start.
  const handles = events.some(
    (e) => !unhandled(e.id) && !(start.parking?.keys.has(start.parking.keyOf(e) ?? '') ?? false),
  );
  if (first && last && handles && options.countCrashedAttempts && start.record) {
    // Not for a turn that has ended meanwhile (its connection was lost while it waited on a read
    // of another turn's): its failure has been recorded already, and would not take this back.
    assertLive(tx);
    const recording = recordTurnStart(
      options.sql,
      t,
      consumer.name,
      consumer.instanceId,
      {
        first: first.id,
        last: last.id,
        isolateUntil: plan.isolating ? plan.isolateUntil : null,
        resetCount: plan.resetStartCount,
      },
      options.statementTimeoutMs,
      () => {
        progress.startSent = true;
      },
    );
    progress.startRecording = recording;
    await recording;
  }
  // Passed events go past the handler loop: resolved as far as the delivery got (see passedOf).
  const handed = events.filter((e) => e.type !== PASSED_TYPE);
  const result = await deliver({
    consumer,
    tx,
    events: handed,
    priorAttempts: plan.priorAttempts,
    spent: plan.spent,
    resolvesUnhandled: unhandled,
    deadlineMs: performance.now() + options.maxTurnMs,
    isStopping: env.isStopping,
    tracer: env.tracer,
    turnSpan: span,
    metrics: env.metrics,
    ...(start.parking ? { parking: start.parking } : {}),
  });
  return handed.length === events.length
    ? result
    : { ...result, resolved: passedOf(events, result.resolved.length) };
}

/**
 * The events a delivery resolved, passed ones included, when the handler loop resolved the first
 * `handled` of the others: a passed event is resolved once every event before it is, as the loop
 * would have resolved it (its resolved events are always a prefix, docs/design.md §4.4).
 */
function passedOf(events: readonly EventRecord[], handled: number): EventRecord[] {
  const resolved: EventRecord[] = [];
  let seen = 0;
  for (const event of events) {
    if (event.type === PASSED_TYPE) {
      resolved.push(event);
      continue;
    }
    if (seen >= handled) break;
    seen += 1;
    resolved.push(event);
  }
  return resolved;
}

/**
 * Records what the delivery did: the events skipped into the dead letters, the log lines, the
 * metrics and the turn span's burnt ids.
 */
export async function recordDelivery(
  env: TurnEnvironment,
  consumer: ResolvedConsumer,
  tx: TransactionSql,
  span: Span,
  result: DeliveryResult,
  settlement: Settlement,
): Promise<void> {
  if (result.deadLetters.length > 0) {
    await recordDeadLetters(tx, env.tables, consumer.name, consumer.instanceId, result.deadLetters);
  }
  if (result.parked.length > 0) {
    const parkedAnew = await recordParked(tx, env.tables, consumer.name, result.parked);
    env.metrics.parked(consumer.name, consumer.instanceId, parkedAnew.length, result.parked.length);
    for (const key of parkedAnew) {
      const first = result.parked.find((p) => p.key === key);
      env.logger.warn(
        {
          consumer: consumer.name,
          instanceId: consumer.instanceId,
          key,
          eventId: first?.event.id,
          error: first?.error,
        },
        'an event used up its attempts: its key is parked (this event and the later ones of the key are set aside)',
      );
    }
  }
  logDelivery(env, consumer, result);
  env.metrics.processed(consumer.name, consumer.instanceId, result.handled);
  env.metrics.late(consumer.name, consumer.instanceId, settlement.lateDeliveries);
  env.metrics.burnt(consumer.name, consumer.instanceId, Number(settlement.burntIdCount));
  if (settlement.burnt.length > 0) span.setAttribute(ATTR.burnt, Number(settlement.burntIdCount));
}

/** Logs a handler failure of the turn and each event it skipped into the dead letters. */
function logDelivery(env: TurnEnvironment, consumer: ResolvedConsumer, result: DeliveryResult): void {
  const failure = result.failure;
  if (failure) {
    env.logger.warn(
      {
        consumer: consumer.name,
        eventId: failure.event.id,
        attempts: failure.attempts,
        maxAttempts: consumer.maxAttempts,
        error: messageOf(failure.error),
      },
      result.dead
        ? 'handler failed at maxAttempts: consumer is dead'
        : 'handler failed; the event will be retried',
    );
  }
  for (const letter of result.deadLetters) {
    env.logger.warn(
      { consumer: consumer.name, eventId: letter.event.id, error: letter.error },
      'skipped an event into dead_letters (skipApplyErrors)',
    );
  }
}

/**
 * Re-delivers the dead letters an operator asked to replay, through the consumer's handler, in the
 * turn's transaction. A replay that fails again clears its request and records the error.
 */
export async function deliverReplays(
  env: TurnEnvironment,
  consumer: ResolvedConsumer,
  tx: TransactionSql,
  span: Span,
  /** Out: the replays this turn claimed (their requests cleared before the handler ran). */
  claims: ReplayClaim[],
): Promise<void> {
  const { tables: t } = env;
  const replays = await selectRequestedReplays(tx, t, consumer.name, consumer.instanceId, consumer.batchSize);
  if (replays.length === 0) return;
  // Kept as claimed either way: a replay whose handler times out is recorded on its dead letter.
  const claim = { deadLetterIds: replays.map((r) => r.deadLetterId) };
  claims.push(claim);
  if (env.options.countCrashedAttempts) {
    await claimReplays(env.options.sql, t, claim, env.options.statementTimeoutMs);
  }
  const result = await deliver({
    consumer: { ...consumer, maxAttempts: 1, skipApplyErrors: false },
    tx,
    events: replays.map((r) => r.event),
    priorAttempts: () => 0,
    resolvesUnhandled: () => false,
    oneByOne: consumer.transactional,
    deadlineMs: performance.now() + env.options.maxTurnMs,
    isStopping: env.isStopping,
    tracer: env.tracer,
    turnSpan: span,
    metrics: env.metrics,
  });
  const done = replays.slice(0, result.resolved.length).map((r) => r.deadLetterId);
  const failedReplay = result.failure ? replays[result.resolved.length] : undefined;
  await finishReplays(
    tx,
    t,
    done,
    failedReplay && result.failure
      ? { deadLetterId: failedReplay.deadLetterId, error: messageOf(result.failure.error) }
      : undefined,
    replays.slice(done.length + (failedReplay ? 1 : 0)).map((r) => r.deadLetterId),
  );
  env.metrics.processed(consumer.name, consumer.instanceId, result.handled);
  env.logger.info(
    { consumer: consumer.name, replayed: done.length, failed: result.failed },
    'replayed dead letters',
  );
}

/**
 * Delivers, in order, the events of the parked keys an operator asked to replay that belong to this
 * lane (docs/design.md §11.4), one attempt each, in the turn's transaction. A key whose events all
 * went through is no longer parked; one that fails again stays parked from that event on (it and
 * the key's later events), its request cleared. Nothing is delivered twice by the replay itself:
 * a delivered event leaves parked_events in the same transaction.
 */
export async function deliverParkedReplays(
  env: TurnEnvironment,
  consumer: ResolvedConsumer,
  tx: TransactionSql,
  span: Span,
  lane: Lane,
  /** Out: the replays this turn claimed (their requests cleared before the handler ran). */
  claims: ReplayClaim[],
): Promise<void> {
  const { tables: t } = env;
  const replays = await selectParkedReplays(tx, t, consumer.name, lane, consumer.batchSize);
  if (replays.length > 0) {
    // Kept as claimed either way: a replay whose handler times out is recorded on its key.
    const claim = { consumer: consumer.name, keys: replays.map((r) => r.key) };
    claims.push(claim);
    if (env.options.countCrashedAttempts) {
      await claimReplays(env.options.sql, t, claim, env.options.statementTimeoutMs);
    }
  }
  for (const replay of replays) {
    const parking: Parking = { keyOf: () => replay.key, keys: new Set() };
    const result = await deliver({
      consumer: { ...consumer, maxAttempts: 1, skipApplyErrors: false, parkKey: true },
      tx,
      events: replay.events,
      priorAttempts: () => 0,
      resolvesUnhandled: () => false,
      oneByOne: consumer.transactional,
      deadlineMs: performance.now() + env.options.maxTurnMs,
      isStopping: env.isStopping,
      tracer: env.tracer,
      turnSpan: span,
      metrics: env.metrics,
      parking,
    });
    const setAside = new Set(result.parked.map((p) => p.event.id));
    const delivered = result.resolved.filter((e) => !setAside.has(e.id)).map((e) => e.id);
    const again = result.parked.find((p) => p.error !== null);
    const unparked = await finishParkedReplay(
      tx,
      t,
      consumer.name,
      replay.key,
      delivered,
      again ? { error: again.error ?? '', attempts: again.attempts } : undefined,
    );
    env.metrics.processed(consumer.name, consumer.instanceId, result.handled);
    env.logger.info(
      {
        consumer: consumer.name,
        key: replay.key,
        replayed: delivered.length,
        ...(again ? { failedAgainOn: again.event.id, error: again.error } : {}),
      },
      unparked
        ? 'parked key replayed in order; it is no longer parked'
        : again
          ? 'parked key replay failed again: the key stays parked from that event on'
          : 'parked key partly replayed; the replay goes on next turn',
    );
  }
}

/**
 * An old lane's part in a change of lane count (docs/design.md §11.3), at the end of its turn: it
 * raises the barrier to a cursor it found above it, tries to switch the change over once it is at
 * the barrier, and once switched, retires when nothing of it is left (no pending gap, no failure).
 * Returns what it did.
 */
export async function settleLaneChange(
  env: TurnEnvironment,
  consumer: ResolvedConsumer,
  tx: TransactionSql,
  change: LaneChange,
  after: { readonly cursor: bigint; readonly pendingGaps: number; readonly healthy: boolean },
): Promise<'raised' | 'switched' | 'retired' | undefined> {
  const { tables: t } = env;
  // Ranges above the barrier (a strict lane waiting at a hole) are the new lanes' ids: not owed.
  // Read once a turn: the switch does not change this lane's ranges.
  let owedRead: Promise<number> | undefined;
  const owed = () =>
    after.pendingGaps === 0
      ? 0
      : (owedRead ??= rangesUpToBarrier(tx, t, consumer.name, consumer.instanceId, change.barrier));
  if (!change.switched) {
    if (after.cursor > change.barrier) {
      await raiseBarrier(tx, t, consumer.name, after.cursor);
      return 'raised';
    }
    if (after.cursor < change.barrier || !after.healthy) return undefined;
    if (consumer.ordering === 'strict' && (await owed()) > 0) return undefined;
    const switched = await trySwitchLanes(tx, t, consumer.name, consumer.instanceId, change, {
      strict: consumer.ordering === 'strict',
      systemIdentifier: env.systemIdentifier,
    });
    if (!switched) return undefined;
    env.logger.info(
      { consumer: consumer.name, from: change.from, to: change.to, barrier: change.barrier },
      'every old lane reached the barrier: the new lanes start there',
    );
    return (await owed()) === 0 ? retired() : 'switched';
  }
  if (after.cursor < change.barrier || !after.healthy || (await owed()) > 0) return undefined;
  return retired();

  async function retired(): Promise<'retired'> {
    await retireLane(tx, t, consumer.name, consumer.instanceId, change, consumer.laneKey);
    env.logger.info(
      { consumer: consumer.name, instanceId: consumer.instanceId, from: change.from, to: change.to },
      'an old lane has handed over and is removed',
    );
    return 'retired';
  }
}

// ---- the writes --------------------------------------------------------------------------------

/** The state machine's view of a consumer's options. */
export function turnRules(consumer: ResolvedConsumer, options: ResolvedOptions): TurnRules {
  return {
    maxAttempts: consumer.maxAttempts,
    skipApplyErrors: consumer.skipApplyErrors,
    transactional: consumer.transactional,
    ordering: consumer.ordering,
    retryDelayMs: options.retryDelayMs,
    retryMaxDelayMs: options.retryMaxDelayMs,
    rearmCooldownMs: options.rearmCooldownMs,
    maxRearmCount: options.maxRearmCount,
    shared: consumer.lane !== null,
  };
}

/** Writes a status change the turn opens with (a time-boxed disable ended, a re-arm) and says so. */
export async function applyOpening(
  env: TurnEnvironment,
  consumer: ResolvedConsumer,
  tx: TransactionSql,
  change: 'reenabled' | 'rearmed',
  state: ConsumerState,
): Promise<void> {
  const { tables: t, logger, options } = env;
  if (change === 'reenabled') {
    await setStatus(tx, t, consumer.name, consumer.instanceId, { status: 'idle', clearDisable: true });
    logger.info({ consumer: consumer.name }, 'time-boxed disable expired; consumer enabled again');
    return;
  }
  await setStatus(tx, t, consumer.name, consumer.instanceId, { status: 'idle', rearm: true });
  logger.warn(
    { consumer: consumer.name, rearm: state.rearmCount, maxRearmCount: options.maxRearmCount },
    're-arming dead consumer after its cooldown',
  );
}

/**
 * After a restore onto another cluster (docs/design.md §5.8): the ranges this
 * fetch did not examine keep old-cluster fences, which mean nothing here; they are fenced afresh.
 * Audited and logged.
 */
export async function clusterChanged(
  env: TurnEnvironment,
  consumer: ResolvedConsumer,
  tx: TransactionSql,
  state: ConsumerState,
  settlement: Settlement,
): Promise<Settlement> {
  await writeAudit(tx, env.tables, {
    actor: 'sluice-dispatcher',
    action: 'cluster-changed',
    consumerName: consumer.name,
    instanceId: consumer.instanceId,
    cursorBefore: state.cursor,
    cursorAfter: settlement.cursor,
    details: {
      previousSystemIdentifier: state.systemIdentifier,
      systemIdentifier: env.systemIdentifier,
      burntRanges: settlement.burnt.length,
      burntIds: settlement.burntIdCount,
    },
  });
  env.logger.warn(
    { consumer: consumer.name, previous: state.systemIdentifier, current: env.systemIdentifier },
    'the database cluster changed (restore or failover to another cluster): pending gaps were resolved by one fresh fetch',
  );
  return { ...settlement, ranges: settlement.ranges.map((r) => ({ ...r, fence: null })) };
}

/**
 * Writes the row a turn ends with, and finishes its crash record (`finishStart`: what it takes off
 * the crashes, see finishTurnStart; false: no record), behind one
 * another and not awaited: the COMMIT goes right behind them instead of a round trip later. The
 * returned promise is awaited once the COMMIT has answered (runTurn): should one of them fail,
 * PostgreSQL has aborted the transaction and answered the COMMIT with a rollback, which postgres.js
 * does not report as an error.
 */
export function writeTurn(
  env: TurnEnvironment,
  consumer: ResolvedConsumer,
  tx: TransactionSql,
  close: TurnClose,
  gapCountDelta: number,
  finishStart: 'start' | 'none' | 'all' | false,
): Promise<bigint | undefined> {
  const { tables: t } = env;
  const saving = saveTurn(tx, t, consumer.name, consumer.instanceId, {
    ...close,
    gapCountDelta,
    systemIdentifier: env.systemIdentifier,
  });
  const writes = Promise.all([
    saving,
    finishStart === false
      ? undefined
      : finishTurnStart(tx, t, consumer.name, consumer.instanceId, close.keepIsolating, finishStart),
  ]).then(([xmin]) => xmin);
  writes.catch(() => undefined);
  return writes;
}

/**
 * Writes the replacement of the rechecked ranges, touching only rows that changed. Returns the row
 * delta. A new hole is dated `now`, the database's clock (stored times follow the database).
 */
export async function persistRanges(
  tx: TransactionSql,
  t: Tables,
  consumer: ResolvedConsumer,
  stored: readonly StoredRange[],
  next: readonly GapRange[],
  now: Date,
): Promise<number> {
  const key = (r: GapRange) => `${r.from}:${r.to}:${r.fence ?? ''}`;
  const before = new Map(stored.map((r) => [key(r), r]));
  const after = new Set(next.map(key));
  const removeFroms = stored.filter((r) => !after.has(key(r))).map((r) => r.from);
  const add: StoredRange[] = next
    .filter((r) => !before.has(key(r)))
    .map((r) => ({ ...r, observedAt: containing(stored, r.from)?.observedAt ?? now }));
  if (removeFroms.length === 0 && add.length === 0) return 0;
  return replaceRanges(tx, t, consumer.name, consumer.instanceId, removeFroms, add);
}

function containing(ranges: readonly StoredRange[], id: bigint): StoredRange | undefined {
  let lo = 0;
  let hi = ranges.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >>> 1;
    const range = ranges[mid] as StoredRange;
    if (id < range.from) hi = mid - 1;
    else if (id > range.to) lo = mid + 1;
    else return range;
  }
  return undefined;
}

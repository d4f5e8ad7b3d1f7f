import type { Span, Tracer } from '@opentelemetry/api';
import { messageOf } from '../errors.js';
import { TOMBSTONE_TYPE, type EventRecord } from '../events.js';
import {
  deliverableIds,
  settleStragglers,
  settleTurn,
  type FetchResult,
  type GapRange,
  type TurnInput,
} from '../gaps/gaps.js';
import { lowestEnded, parseSnapshot, parseXidList, runningBelow, type Snapshot } from '../gaps/snapshot.js';
import type { Logger } from '../logger.js';
import { SHARED_INSTANCE_ID, type ResolvedConsumer, type ResolvedOptions } from '../options.js';
import { lockConsumer, saveTurn, setStatus, type LockedRow } from '../queries/consumers.js';
import { writeAudit } from '../queries/audit.js';
import { recordDeadLetters, type DeadLetterInput } from '../queries/dead-letters.js';
import { fetchBatch, type FetchedBatch, type StartStragglers } from '../queries/events.js';
import { replaceRanges, selectRangesToRecheck, type StoredRange } from '../queries/gaps.js';
import { finishReplays, selectRequestedReplays } from '../queries/replays.js';
import { finishTurnStart, recordTurnStart } from '../queries/turn-starts.js';
import type { Tables } from '../schema/tables.js';
import type { Sql, TransactionSql } from '../sql-types.js';
import { ATTR } from '../telemetry/attributes.js';
import { settleWithin, TIMED_OUT } from '../time-limit.js';
import type { DispatcherMetrics } from '../telemetry/metrics.js';
import { endSpanWithError, startTurnSpan } from '../telemetry/tracing.js';
import { deliver, TransactionalHandlerTimeout, type HandlerFailure } from './deliver.js';
import { isWaitingToRetry } from './backoff.js';
import { isPlain } from './idle-check.js';
import { rearmDecision } from './rearm.js';
import type { EventBatch, SharedReads } from './shared-reads.js';
import { guardedBegin } from '../connections/guarded-transaction.js';

export type SkipReason = 'locked' | 'disabled' | 'dead' | 'missing' | 'retry-later';

export interface TurnOutcome {
  readonly handled: number;
  readonly failed: number;
  readonly skipped: SkipReason | undefined;
  /** More is waiting right now: the fetch was cut by LIMIT or the turn ran out of time. */
  readonly hasMore: boolean;
  /** The fetch was cut by LIMIT and everything it returned was resolved: a larger batch would have helped. */
  readonly filledBatch: boolean;
  readonly pendingGaps: number;
  readonly cursor: bigint | undefined;
  readonly head: bigint | undefined;
  readonly dead: boolean;
  /** A transactional handler timed out: the turn was rolled back and this attempt must be recorded. */
  readonly timedOut?: HandlerFailure;
}

export interface TurnEnvironment {
  readonly options: ResolvedOptions;
  readonly tables: Tables;
  readonly metrics: DispatcherMetrics;
  readonly tracer: Tracer;
  readonly logger: Logger;
  readonly systemIdentifier: string | null;
  /** Full batches shared by the consumers of this dispatcher (absent: every turn reads for itself). */
  readonly reads?: SharedReads;
  /** A turn whose fetch came back full starts reading this many events above it (needs `reads`). */
  readonly readAhead?: number;
  /** Called once per consumer and process when a dead consumer's re-arms are used up. */
  readonly onRearmExhausted: (consumer: ResolvedConsumer, lastError: string | null) => void;
}

/**
 * The turn's last statements, sent but not awaited before COMMIT. Should one fail, PostgreSQL has
 * aborted the transaction and answers the COMMIT with a rollback, which postgres.js does not report
 * as an error: their own failure is what says the turn did not commit.
 */
interface LastWrites {
  writes?: Promise<unknown>;
}

/** What a turn has done that outlives it should it fail: read by the caller after a failure. */
export interface TurnProgress {
  /**
   * The turn's start record (crash accounting, F6) was sent: a failure the process survives must
   * take that start back. A turn that failed before it has no start to take back, and must leave a
   * start recorded by a crashed process alone.
   */
  startSent: boolean;
}

const MAX_XID = 2n ** 63n - 1n;
const NO_RANGES: readonly GapRange[] = [];

/**
 * One consumer turn in one transaction (DESIGN §4.3): lock the cursor row (SKIP LOCKED), re-fetch
 * the gap ranges that may have changed and the events above the cursor in one statement, deliver in
 * id order, and persist cursor, gaps, attempts and status before COMMIT.
 * Infrastructure failures propagate; handler failures are part of the outcome.
 */
export async function runTurn(
  env: TurnEnvironment,
  consumer: ResolvedConsumer,
  limit: number = consumer.batchSize,
  expectedCursor?: bigint,
  progress: TurnProgress = { startSent: false },
): Promise<TurnOutcome> {
  const span = startTurnSpan(env.tracer, consumer.name, consumer.instanceId);
  let body: Promise<TurnOutcome> | undefined;
  let endTurn: () => void = () => undefined;
  const lastWrites: LastWrites = {};
  try {
    // A guarded transaction: once its connection is lost, nothing of the turn runs on it any more
    // (see connections/guarded-transaction.ts).
    const outcome = await guardedBegin(env.options.sql, (tx, live) => {
      endTurn = () => {
        live.end();
      };
      body = turnInTransaction(env, consumer, tx, span, limit, expectedCursor, lastWrites, progress);
      return body;
    });
    // A failed last write aborted the transaction, and the COMMIT behind it rolled it back.
    await lastWrites.writes;
    span.setAttributes({
      [ATTR.processed]: outcome.handled,
      [ATTR.failed]: outcome.failed,
      ...(outcome.skipped ? { [ATTR.skipReason]: outcome.skipped } : {}),
    });
    span.end();
    return outcome;
  } catch (error) {
    if (error instanceof TransactionalHandlerTimeout) {
      span.setAttributes({ [ATTR.failed]: 1 });
      span.end();
      return {
        handled: 0,
        failed: 1,
        skipped: undefined,
        hasMore: true,
        filledBatch: false,
        pendingGaps: 0,
        cursor: undefined,
        head: undefined,
        dead: false,
        timedOut: error.failure,
      };
    }
    endSpanWithError(span, error);
    // begin() may have settled on a lost connection while the turn was still in a handler: end the
    // turn (its statements fail at once, even one the client stranded on the dead connection) and
    // wait until its body has settled, so the next turn of this consumer never overlaps with it
    // (I2, I3). A handler returns within handlerTimeoutMs; past that bound the guard alone keeps
    // the body from going on.
    endTurn();
    if (body) {
      const settled = await settleWithin(
        body.catch(() => undefined),
        consumer.handlerTimeoutMs + env.options.statementTimeoutMs,
      );
      if (settled === TIMED_OUT) {
        env.logger.warn(
          { consumer: consumer.name, error: messageOf(error) },
          "the failed turn's handler did not return within its time; the turn is abandoned",
        );
      }
    }
    throw error;
  } finally {
    endTurn();
  }
}

async function turnInTransaction(
  env: TurnEnvironment,
  consumer: ResolvedConsumer,
  tx: TransactionSql,
  span: Span,
  limit: number,
  expectedCursor: bigint | undefined,
  lastWrites: LastWrites,
  progress: TurnProgress,
): Promise<TurnOutcome> {
  const { options, tables: t } = env;
  // The lock and the read of everything the turn decides on, sent now so that the early fetch goes
  // after them. Nothing the turn uses is read before its row is held (see lockConsumer).
  const lock = lockConsumer(tx, t, consumer.name, consumer.instanceId, {
    statementTimeoutMs: options.statementTimeoutMs,
    idleInTransactionTimeoutMs: consumer.handlerTimeoutMs + options.statementTimeoutMs,
  });
  lock.row.catch(() => undefined);
  // The fetch for the cursor this turn expects (the pre-check's, or its previous turn's), sent right
  // behind the lock: the same statements in the same order and transaction as ever, one round trip
  // fewer. Its rows are used only if the locked row has that cursor and nothing that changes what
  // the turn would fetch (no pending range, no replay, the same cluster). Not sent when another
  // turn's read of that cursor is there to take; offered to the other consumers' turns at once.
  const early =
    expectedCursor === undefined || env.reads?.has(expectedCursor)
      ? undefined
      : readFrom(tx, t, expectedCursor, NO_RANGES, limit, env.reads);
  early?.catch(() => undefined); // fails with the lock, whose failure the turn reports
  const row = await lock.row;
  if (!row) return skipped('locked');
  const now = row.now;
  let rearmCount = row.rearm_count;
  let rearmed = false;

  if (row.status === 'disabled') {
    if (row.disabled_until === null || row.disabled_until > now) return skipped('disabled', row);
    await setStatus(tx, t, consumer.name, consumer.instanceId, { status: 'idle', clearDisable: true });
    env.logger.info({ consumer: consumer.name }, 'time-boxed disable expired; consumer enabled again');
  } else if (row.status === 'dead') {
    const decision = rearmDecision(
      { rearmCount: row.rearm_count, lastWriteAt: row.updated_at },
      now,
      options,
    );
    if (decision === 'exhausted') env.onRearmExhausted(consumer, row.last_error);
    if (decision !== 'rearm') return { ...skipped('dead', row), dead: true };
    await setStatus(tx, t, consumer.name, consumer.instanceId, { status: 'idle', rearm: true });
    rearmCount += 1;
    rearmed = true;
    env.logger.warn(
      { consumer: consumer.name, rearm: rearmCount, maxRearmCount: options.maxRearmCount },
      're-arming dead consumer after its cooldown',
    );
    row.attempts = 0;
  }

  // A failed event is retried after a growing delay (the database clock decides, for all instances).
  if (row.skip_event_id === null && isWaitingToRetry(row, now, options)) return skipped('retry-later', row);

  // Replays an operator requested (DESIGN §6): delivered before new events, out of order by nature.
  if (row.replays_pending) await deliverReplays(env, consumer, tx, span);

  const xid = BigInt(row.xid);
  const lockSnapshot = parseSnapshot(row.snapshot);
  const cursor = BigInt(row.cursor);

  // 'now' consumers: the events in flight when it registered, once every transaction of that
  // moment has ended, delivered by this turn's fetch with the rest (DESIGN §4, startFrom).
  const start = stragglersDue(row, lockSnapshot);

  // After a restore onto another cluster no transaction of the old one can still commit, and its
  // xids mean nothing here: one fresh fetch resolves every pending range (DESIGN §3, cluster identity).
  const clusterChanged =
    env.systemIdentifier !== null &&
    row.system_identifier !== null &&
    row.system_identifier !== env.systemIdentifier;

  let stored: StoredRange[] = [];
  if (row.gap_count > 0 || clusterChanged) {
    const watch = parseXidList(row.gap_watch);
    stored = await selectRangesToRecheck(tx, t, consumer.name, consumer.instanceId, {
      all: row.gaps_recheck || clusterChanged || consumer.ordering === 'strict',
      xmin: lockSnapshot.xmin,
      lowestEnded: lowestEnded(watch, lockSnapshot),
    });
  }
  // Holes observed by earlier turns get this turn's xid as their fence: it was allocated after the
  // snapshot that saw them (never the snapshot's xmax: a running writer can hold an xid above it).
  const rechecked: GapRange[] = stored.map((r) => (r.fence === null ? { ...r, fence: xid } : r));

  // A turn with no range to recheck reads only above its cursor: it may share that read (or use
  // another consumer's) with the consumers at the same cursor.
  const plain = stored.length === 0 && !clusterChanged && start === undefined;
  const reads = plain ? env.reads : undefined;
  const sentEarly = plain && !row.replays_pending && cursor === expectedCursor ? early : undefined;
  const shared =
    reads && !sentEarly ? await reads.take(cursor, limit, options.statementTimeoutMs) : undefined;
  const batch =
    shared ??
    (await (sentEarly ??
      readFrom(tx, t, cursor, consumer.ordering === 'fast' ? rechecked : [], limit, reads, start)));
  // Catching up: the next batch is read from the pool while this one is delivered and committed.
  const last = batch.events[batch.events.length - 1];
  const aheadLimit = env.readAhead;
  if (reads && aheadLimit !== undefined && last && batch.events.length === limit) {
    reads.readAhead(last.id, aheadLimit, () => readBatch(options.sql, t, last.id, aheadLimit));
  }
  const head = batch.head;
  const events = new Map<bigint, EventRecord>();
  for (const event of batch.events) events.set(event.id, event);
  const fetch: FetchResult = {
    ids: [...events.keys()],
    // A shared batch is a full one: the events beyond it were not examined.
    complete: shared === undefined && events.size < limit,
    xmin: clusterChanged ? MAX_XID : batch.xmin,
  };
  const input: TurnInput = {
    cursor,
    rechecked,
    fetch,
    ordering: consumer.ordering,
    ...(start ? { stragglersUpTo: start.upto } : {}),
  };
  const deliverable = deliverableIds(input);
  let ids = deliverable;

  // Nothing after the cursor and nothing to record: the turn ends without writing its row, and its
  // COMMIT, with no xid, waits for no WAL flush. A woken pass can start such a turn for a consumer
  // that had already delivered what the wake-up announced.
  if (
    ids.length === 0 &&
    fetch.complete &&
    head <= cursor &&
    hasNothingToRecord(row, consumer, env, stored, rearmed)
  ) {
    return {
      handled: 0,
      failed: 0,
      skipped: undefined,
      hasMore: false,
      filledBatch: false,
      pendingGaps: 0,
      cursor,
      head,
      dead: false,
    };
  }

  // Crash accounting (F6): a start at this batch that never committed was a crash.
  const markerFirst = row.marker_first === null ? null : BigInt(row.marker_first);
  // A re-arm resets the attempts, crashed ones included.
  const crashed = rearmed ? 0 : (row.marker_started ?? 0);
  const isolateUntil =
    markerFirst !== null && (crashed > 0 || row.marker_isolate_until !== null)
      ? maxOf(BigInt(row.marker_last ?? markerFirst), BigInt(row.marker_isolate_until ?? '0'))
      : null;
  const firstId = ids[0];
  const isolating = isolateUntil !== null && firstId !== undefined && firstId <= isolateUntil;
  if (isolating) ids = ids.slice(0, 1);
  const stuckId = row.stuck_event_id === null ? null : BigInt(row.stuck_event_id);
  const skipId = row.skip_event_id === null ? null : BigInt(row.skip_event_id);
  // Operator skips (already in dead_letters) and tombstones are resolved without the handler.
  const resolvesUnhandled = (event: EventRecord) => event.type === TOMBSTONE_TYPE || event.id === skipId;
  // Crashes count against the event that starts the turn: the one they happened on, or, while
  // isolating, the next event of a crashed batch (they were not the earlier events' doing).
  const chargedCrashes =
    markerFirst !== null &&
    firstId !== undefined &&
    (markerFirst === firstId || (isolating && markerFirst < firstId))
      ? crashed
      : 0;
  const priorAttempts = (id: bigint) =>
    (stuckId === id ? row.attempts : 0) + (id === firstId ? chargedCrashes : 0);

  let result: Awaited<ReturnType<typeof deliver>>;
  const toDeliver = ids.map((id) => events.get(id) as EventRecord);
  const firstEvent = toDeliver[0];
  if (firstEvent && !resolvesUnhandled(firstEvent) && priorAttempts(firstEvent.id) >= consumer.maxAttempts) {
    // The process died maxAttempts times on this event: do not hand it to the handler again.
    const error = new Error(
      `the process stopped ${crashed} time(s) while event ${firstEvent.id} was being handled`,
    );
    const attempts = priorAttempts(firstEvent.id);
    result = consumer.skipApplyErrors
      ? {
          resolved: [firstEvent],
          failure: undefined,
          dead: false,
          handled: 0,
          failed: 1,
          deadLetters: [{ event: firstEvent, reason: 'apply-error', error: error.message, attempts }],
        }
      : {
          resolved: [],
          deadLetters: [],
          failure: { event: firstEvent, error, attempts },
          dead: true,
          handled: 0,
          failed: 1,
        };
  } else {
    if (firstEvent && options.countCrashedAttempts) {
      const last = toDeliver[toDeliver.length - 1] as EventRecord;
      await recordTurnStart(
        options.sql,
        t,
        consumer.name,
        consumer.instanceId,
        {
          first: firstEvent.id,
          last: last.id,
          isolateUntil: isolating ? isolateUntil : null,
          resetCount: rearmed,
        },
        options.statementTimeoutMs,
        () => {
          progress.startSent = true;
        },
      );
    }
    result = await deliver({
      consumer,
      tx,
      events: toDeliver,
      priorAttempts,
      resolvesUnhandled,
      deadlineMs: performance.now() + options.maxTurnMs,
      tracer: env.tracer,
      turnSpan: span,
      metrics: env.metrics,
    });
  }

  const resolvedIds = result.resolved.map((e) => e.id);
  let settlement = settleTurn(input, resolvedIds);
  if (clusterChanged) {
    // Ranges this fetch did not examine keep old-cluster fences, which mean nothing here: refence them.
    settlement = { ...settlement, ranges: settlement.ranges.map((r) => ({ ...r, fence: null })) };
    await writeAudit(tx, t, {
      actor: 'sluice-dispatcher',
      action: 'cluster-changed',
      consumerName: consumer.name,
      instanceId: consumer.instanceId,
      cursorBefore: cursor,
      cursorAfter: settlement.cursor,
      details: {
        previousSystemIdentifier: row.system_identifier,
        systemIdentifier: env.systemIdentifier,
        burntRanges: settlement.burnt.length,
        burntIds: settlement.burntIdCount,
      },
    });
    env.logger.warn(
      { consumer: consumer.name, previous: row.system_identifier, current: env.systemIdentifier },
      'the database cluster changed (restore or failover to another cluster): pending gaps were resolved by one fresh fetch',
    );
  }
  const gapDelta = await persistRanges(tx, t, consumer, stored, settlement.ranges, now);
  const remaining = row.gap_count + gapDelta;
  const maxFence = [
    row.max_fence === null ? 0n : BigInt(row.max_fence),
    ...settlement.ranges.map((r) => r.fence ?? 0n),
  ].reduce(maxOf, 0n);

  const failure = result.failure;
  const progressed = settlement.cursor > cursor || resolvedIds.length > 0;
  const attempts = failure
    ? failure.attempts
    : stuckId !== null && !resolvedIds.includes(stuckId)
      ? row.attempts
      : 0;
  const deadLetters: DeadLetterInput[] = [...result.deadLetters];
  if (deadLetters.length > 0) await recordDeadLetters(tx, t, consumer.name, consumer.instanceId, deadLetters);
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
  for (const letter of deadLetters) {
    env.logger.warn(
      { consumer: consumer.name, eventId: letter.event.id, error: letter.error },
      'skipped an event into dead_letters (skipApplyErrors)',
    );
  }
  const hasMore = !fetch.complete || resolvedIds.length < ids.length || settlement.cursor < head;
  // The state row and the turn-start record are written in one round trip (pipelined statements).
  const saving = saveTurn(tx, t, consumer.name, consumer.instanceId, {
    cursor: settlement.cursor,
    status: result.dead ? 'dead' : hasMore ? 'processing' : 'idle',
    attempts,
    stuckEventId: failure ? failure.event.id : attempts > 0 ? stuckId : null,
    skipEventId: skipId !== null && !resolvedIds.includes(skipId) ? skipId : null,
    lastError: failure ? messageOf(failure.error) : null,
    rearmCount: settlement.cursor > cursor ? 0 : rearmCount,
    progressed,
    gapCountDelta: gapDelta,
    gapsUnfenced: settlement.ranges.filter((r) => r.fence === null).length,
    gapWatch: remaining > 0 && maxFence > 0n ? runningBelow(lockSnapshot, maxFence) : [],
    gapsRecheck: settlement.needsRecheck,
    start: start ? settleStragglers(start, fetch, deliverable, resolvedIds.length) : 'unchanged',
    systemIdentifier: env.systemIdentifier,
  });
  const keepIsolating = isolating && settlement.cursor < isolateUntil ? isolateUntil : null;
  // Not awaited here: the COMMIT goes right behind these statements instead of a round trip later.
  lastWrites.writes = Promise.all([
    saving,
    progress.startSent || markerFirst !== null
      ? finishTurnStart(tx, t, consumer.name, consumer.instanceId, keepIsolating)
      : undefined,
  ]);
  lastWrites.writes.catch(() => undefined); // runTurn awaits it once the COMMIT has answered

  env.metrics.processed(consumer.name, consumer.instanceId, result.handled);
  env.metrics.late(consumer.name, consumer.instanceId, settlement.lateDeliveries);
  env.metrics.burnt(consumer.name, consumer.instanceId, Number(settlement.burntIdCount));
  if (settlement.burnt.length > 0) span.setAttribute(ATTR.burnt, Number(settlement.burntIdCount));
  return {
    handled: result.handled,
    failed: result.failed,
    skipped: undefined,
    hasMore: hasMore && !result.dead && !failure,
    filledBatch: !fetch.complete && !failure && resolvedIds.length === ids.length && !isolating,
    pendingGaps: remaining,
    cursor: settlement.cursor,
    head,
    dead: result.dead,
  };
}

/**
 * The turn's fetch (one statement, one snapshot: DESIGN §5), started at once. With `reads`, it is
 * offered to the other consumers' turns from the same cursor while it runs, and kept for them if
 * LIMIT cut it.
 */
function readFrom(
  tx: TransactionSql,
  t: Tables,
  cursor: bigint,
  ranges: readonly GapRange[],
  limit: number,
  reads: SharedReads | undefined,
  start?: StartStragglers,
): Promise<EventBatch> {
  const bounds = { from: ranges.map((r) => r.from), to: ranges.map((r) => r.to) };
  const reading = fetchBatch(tx, t, cursor, bounds, limit, start).then(batchOf);
  reads?.offer(cursor, limit, reading);
  return reading;
}

/**
 * A 'now' consumer's stragglers, when they are due: every transaction that was in flight at its
 * registration has ended (the snapshot taken once the row is held has passed the registration's
 * fence), so every one of them that committed is visible to this turn's fetch.
 */
function stragglersDue(row: LockedRow, snapshot: Snapshot): StartStragglers | undefined {
  if (row.start_fence === null || row.start_snapshot === null || row.start_upto === null) return undefined;
  if (snapshot.xmin <= BigInt(row.start_fence)) return undefined;
  return {
    after: row.start_after === null ? 0n : BigInt(row.start_after),
    upto: BigInt(row.start_upto),
    snapshot: row.start_snapshot,
  };
}

/** The events above `cursor` read by one autocommit statement of the pool. */
async function readBatch(sql: Sql, t: Tables, cursor: bigint, limit: number): Promise<EventBatch> {
  return batchOf(await fetchBatch(sql, t, cursor, { from: [], to: [] }, limit));
}

function batchOf(fetched: FetchedBatch): EventBatch {
  return { events: fetched.events, xmin: parseSnapshot(fetched.snapshot).xmin, head: BigInt(fetched.head) };
}

/**
 * Writes the replacement of the rechecked ranges, touching only rows that changed. Returns the row
 * delta. A new hole is dated `now`, the database's clock (stored times follow the database).
 */
async function persistRanges(
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

/**
 * Re-delivers the dead letters an operator asked to replay, through the consumer's handler, in the
 * turn's transaction. A replay that fails again clears its request and records the error.
 */
async function deliverReplays(
  env: TurnEnvironment,
  consumer: ResolvedConsumer,
  tx: TransactionSql,
  span: Span,
) {
  const { tables: t } = env;
  const replays = await selectRequestedReplays(tx, t, consumer.name, consumer.instanceId, consumer.batchSize);
  if (replays.length === 0) return;
  const result = await deliver({
    consumer: { ...consumer, maxAttempts: 1, skipApplyErrors: false },
    tx,
    events: replays.map((r) => r.event),
    priorAttempts: () => 0,
    resolvesUnhandled: () => false,
    deadlineMs: performance.now() + env.options.maxTurnMs,
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
  );
  env.metrics.processed(consumer.name, consumer.instanceId, result.handled);
  env.logger.info(
    { consumer: consumer.name, replayed: done.length, failed: result.failed },
    'replayed dead letters',
  );
}

/**
 * Whether a turn that found no event has nothing to write either: a shared, plain consumer (see
 * isPlain) already idle, with no stuck event, unfenced or flagged gap, crash-accounting record or
 * re-arm, and a row written in this cluster. Per-instance consumers still write (their row's
 * last_seen_at says the instance lives).
 */
function hasNothingToRecord(
  row: LockedRow,
  consumer: ResolvedConsumer,
  env: TurnEnvironment,
  stored: readonly StoredRange[],
  rearmed: boolean,
): boolean {
  return (
    consumer.instanceId === SHARED_INSTANCE_ID &&
    isPlain(row) &&
    row.status === 'idle' &&
    !rearmed &&
    row.stuck_event_id === null &&
    row.gaps_unfenced === 0 &&
    !row.gaps_recheck &&
    stored.length === 0 &&
    row.marker_first === null &&
    (env.systemIdentifier === null || row.system_identifier === env.systemIdentifier)
  );
}

function skipped(reason: SkipReason, row?: LockedRow): TurnOutcome {
  return {
    handled: 0,
    failed: 0,
    skipped: reason,
    hasMore: false,
    filledBatch: false,
    pendingGaps: row?.gap_count ?? 0,
    cursor: row ? BigInt(row.cursor) : undefined,
    head: undefined,
    dead: false,
  };
}

function maxOf(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}

export type { Snapshot };

import type { Span, Tracer } from '@opentelemetry/api';
import { guardedBegin, type Liveness } from '../connections/guarded-transaction.js';
import {
  choiceOvertaken,
  cleanViewOf,
  closeTurn,
  type DeliveryPlan,
  fenced,
  type FetchChoice,
  hasNothingToRecord,
  type HeldState,
  heldStateOf,
  type Opening,
  openTurn,
  planDelivery,
  type TurnRules,
  unresolvedEventOf,
} from '../consumer-state/consumer-state.js';
import { messageOf } from '../errors.js';
import { PASSED_TYPE, passedStub, TOMBSTONE_TYPE, type EventRecord } from '../events.js';
import { deliverableIds, settleTurn, type GapRange, type TurnInput } from '../gaps/gaps.js';
import { isAnotherKey, keptByAnotherKey } from '../lanes/lanes.js';
import type { Logger } from '../logger.js';
import type { ResolvedConsumer, ResolvedOptions } from '../options.js';
import { selectRangesToRecheck, type StoredRange } from '../queries/gaps.js';
import { askReplaysAgain, replayTimedOut, type ReplayClaim } from '../queries/replays.js';
import { takeBackTurnStart } from '../queries/turn-starts.js';
import type { Tables } from '../schema/tables.js';
import type { Sql, TransactionSql } from '../sql-types.js';
import { ATTR } from '../telemetry/attributes.js';
import type { DispatcherMetrics } from '../telemetry/metrics.js';
import { endSpanWithError, startTurnSpan } from '../telemetry/tracing.js';
import { settleWithin, TIMED_OUT } from '../time-limit.js';
import { TransactionalHandlerTimeout, type DeliveryResult, type HandlerFailure } from './deliver.js';
import type { LaneReads } from './lane-reads.js';
import type { SharedReads } from './shared-reads.js';
import {
  applyOpening,
  clusterChanged,
  crashedOut,
  deliverParkedReplays,
  deliverReplays,
  deliveredOf,
  type EarlyFetch,
  fetchFilterOf,
  fetchTurnBatch,
  lockWithEarlyFetch,
  parkedReplayLane,
  parkingOf,
  settleLaneChange,
  persistRanges,
  recordDelivery,
  startAndDeliver,
  turnInputOf,
  turnRules,
  type TurnBatch,
  writeTurn,
} from './turn-steps.js';

export type SkipReason = 'locked' | 'disabled' | 'dead' | 'missing' | 'retry-later' | 'version' | 'other-key';

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
  /**
   * A transactional handler timed out: the turn was rolled back and this failure must be recorded
   * (an attempt when `counted`: not a batchHandler's).
   */
  readonly timedOut?: HandlerFailure & { readonly counted: boolean };
  /** An old lane of a change of lane count handed over and its row is gone (docs/design.md §11.3). */
  readonly retired?: boolean;
}

export interface TurnEnvironment {
  readonly options: ResolvedOptions;
  /**
   * The pool of the turn's transaction (one connection, whose BEGIN goes out with the row lock:
   * TurnConnections in dispatcher/slots.ts); `options.sql` serves the statements made beside it.
   */
  readonly turnSql: Sql;
  readonly tables: Tables;
  readonly metrics: DispatcherMetrics;
  readonly tracer: Tracer;
  readonly logger: Logger;
  readonly systemIdentifier: string | null;
  /** Full batches shared by the consumers of this dispatcher (absent: every turn reads for itself). */
  readonly reads?: SharedReads;
  /** Group reads shared by the lanes of a consumer this dispatcher turns (docs/design.md §11.2). */
  readonly laneReads?: LaneReads;
  /** A turn whose fetch came back full starts reading this many events above it (needs `reads`). */
  readonly readAhead?: number;
  /** Called once per consumer and process when a dead consumer's re-arms are used up. */
  readonly onRearmExhausted: (consumer: ResolvedConsumer, lastError: string | null) => void;
  /**
   * The turn failed other than by its handler's timeout (its connection was lost, a statement
   * failed) while the process lives on: called at once, before the turn waits for a handler call
   * still running, so that a start record it sent is taken back before another instance's turn of
   * the consumer can take it for a crash (docs/design.md §4.5). Its promise is `progress.lost`.
   */
  readonly onLost?:
    ((consumer: ResolvedConsumer, error: unknown, progress: TurnProgress) => Promise<void>) | undefined;
  /** Whether the dispatcher stops: a turn hands no further event to its handler then. */
  readonly isStopping?: (() => boolean) | undefined;
}

/**
 * The turn's last statements, sent but not awaited before COMMIT. Should one fail, PostgreSQL has
 * aborted the transaction and answers the COMMIT with a rollback, which postgres.js does not report
 * as an error: their own failure is what says the turn did not commit.
 */
interface LastWrites {
  /** Settles with the row's xmin as the turn wrote it. */
  writes?: Promise<bigint | undefined>;
}

/** What a turn has done that outlives it should it fail: read by the caller after a failure. */
export interface TurnProgress {
  /**
   * The turn's start record (crash accounting, F6) was sent: a failure the process survives must
   * take that start back. A turn that failed before it has no start to take back, and must leave a
   * start recorded by a crashed process alone.
   */
  startSent: boolean;
  /** In: the row's xmin as this process's last committed turn of the consumer left it, if any. */
  readonly lastWrite?: bigint | undefined;
  /** Out: the row's xmin once this turn commits, when it wrote the row (as the write returned it). */
  wrote?: bigint;
  /**
   * Out: the row's xmin as this turn found it once held. A failure recorded after the turn ended
   * applies only while the row is still as the turn found it (see recordFailedAttempt).
   */
  heldXmin?: bigint;
  /** Out: replays whose requests this turn cleared before their handlers ran (claimReplays). */
  claims?: ReplayClaim[];
  /** Out: the turn is in its replays (a handler timeout there is the replay's one attempt). */
  replaying?: boolean;
  /** Out: the failed turn's record (TurnEnvironment.onLost), made while its handler may still run. */
  lost?: Promise<void>;
  /** Out: the turn start's statement, once sent (settles when it is recorded, or failed). */
  startRecording?: Promise<void>;
  /** Out: the turn's transaction, once begun: when a statement of it last got its answer. */
  liveness?: Liveness;
}

/**
 * A transactional handler's timeout, still inside its turn's transaction: the turn's start is taken
 * back before the rollback frees the row (takeBackTurnStart), and the attempt is recorded once it
 * has (recordFailedAttempt, which then takes nothing back). Rethrows `error` in every case. Once the
 * statement is sent nothing else takes the start back, even when its answer comes too late: a
 * statement that waited for a connection still runs, and a second decrement would take off another
 * start's crash. (One that never runs leaves the start counted as a crash, as before.)
 */
async function timedOutStartTakenBack(
  env: TurnEnvironment,
  consumer: ResolvedConsumer,
  progress: TurnProgress,
  error: unknown,
): Promise<never> {
  if (error instanceof TransactionalHandlerTimeout && progress.startSent) {
    progress.startSent = false;
    await takeBackTurnStart(
      env.options.sql,
      env.tables,
      consumer.name,
      consumer.instanceId,
      env.options.statementTimeoutMs,
    ).catch(() => undefined);
  }
  throw error;
}

/**
 * One consumer turn in one transaction (docs/design.md §4.3): lock the cursor row (SKIP LOCKED), re-fetch
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
    const outcome = await guardedBegin(env.turnSql, (tx, live) => {
      progress.liveness = live;
      endTurn = () => {
        live.end();
      };
      body = turnInTransaction(env, consumer, tx, span, limit, expectedCursor, lastWrites, progress).catch(
        (error: unknown) => timedOutStartTakenBack(env, consumer, progress, error),
      );
      return body;
    });
    // A failed last write aborted the transaction, and the COMMIT behind it rolled it back.
    const wrote = await lastWrites.writes;
    if (wrote !== undefined) progress.wrote = wrote;
    span.setAttributes({
      [ATTR.processed]: outcome.handled,
      [ATTR.failed]: outcome.failed,
      ...(outcome.skipped ? { [ATTR.skipReason]: outcome.skipped } : {}),
    });
    span.end();
    return outcome;
  } catch (error) {
    if (!(error instanceof TransactionalHandlerTimeout)) {
      // begin() may have settled on a lost connection while the turn was still in a handler, or
      // waiting on something else than its transaction (another turn's shared read, a
      // read-ahead): end the turn first. Its statements fail at once (even one the client stranded
      // on the dead connection), and once it goes on it records no turn start and calls no handler.
      endTurn();
      const lost = env.onLost?.(consumer, error, progress);
      if (lost) {
        lost.catch(() => undefined); // awaited by the caller once the turn has settled
        progress.lost = lost;
      }
    }
    // A replay whose own handler ran out of time has had its one attempt: recorded on its dead
    // letter or parked key first (so that it is not asked for again below); the consumer row is not
    // its (the event is below the cursor).
    const replayTimedOutOn =
      error instanceof TransactionalHandlerTimeout && progress.replaying === true ? error.failure : undefined;
    if (replayTimedOutOn) {
      for (const claim of progress.claims ?? []) {
        await replayTimedOut(
          env.options.sql,
          env.tables,
          claim,
          replayTimedOutOn.event.id,
          messageOf(replayTimedOutOn.error),
          env.options.statementTimeoutMs,
        ).catch((failed: unknown) => {
          env.logger.warn(
            { consumer: consumer.name, eventId: replayTimedOutOn.event.id, error: messageOf(failed) },
            'could not record the timed-out replay',
          );
        });
      }
    }
    // The turn rolled back and the process lives on: the other replays it claimed are asked for again.
    if (progress.claims && progress.claims.length > 0) {
      await askReplaysAgain(env.options.sql, env.tables, progress.claims, env.options.statementTimeoutMs);
    }
    if (replayTimedOutOn) {
      span.setAttributes({ [ATTR.failed]: 1 });
      span.end();
      return outcome({ failed: 1, hasMore: true });
    }
    if (error instanceof TransactionalHandlerTimeout) {
      span.setAttributes({ [ATTR.failed]: 1 });
      span.end();
      return outcome({ failed: 1, hasMore: true, timedOut: error.failure });
    }
    endSpanWithError(span, error);
    // The turn was ended above: wait until its body has settled, so the next turn of this consumer
    // never overlaps with it (I2, I3). A handler returns within handlerTimeoutMs; past that bound
    // the guard alone keeps the body from going on.
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
  const turn: TurnScope = {
    env,
    consumer,
    tx,
    span,
    limit,
    progress,
    rules: turnRules(consumer, env.options),
  };
  const hold = await holdRow(turn, expectedCursor);
  if (hold.skip) return hold.skip;
  const { held, opening } = hold;
  const { state } = opening;
  if (opening.change !== null) await applyOpening(env, consumer, tx, opening.change, state);
  const replayedParked = await deliverRequestedReplays(turn, held, state.replaysPending);
  const fetched = await fetchChosen(turn, hold, expectedCursor, replayedParked);
  const { batch, chosen, rechecked, stored } = fetched;
  const { input, events } = turnInputOf(batch, chosen, rechecked, consumer, limit);
  const deliverable = deliverableIds(input);
  if (
    deliverable.length === 0 &&
    input.fetch.complete &&
    batch.head <= state.cursor &&
    hasNothingToRecord(held, chosen, env.systemIdentifier, turn.rules, stored.length)
  ) {
    // Nothing to deliver and nothing to record: the row is not rewritten. (Its lock took an xid,
    // so the COMMIT still writes and flushes a commit record.)
    return outcome({ cursor: state.cursor, head: batch.head });
  }
  const { plan, result } = await deliverPlanned(turn, hold, batch, events, deliverable);
  return closeAndWrite(turn, lastWrites, { hold, fetched, input, deliverable, plan, result });
}

/** What every phase of one turn works with. */
interface TurnScope {
  readonly env: TurnEnvironment;
  readonly consumer: ResolvedConsumer;
  readonly tx: TransactionSql;
  readonly span: Span;
  readonly limit: number;
  readonly progress: TurnProgress;
  readonly rules: TurnRules;
}

/** The row as the turn holds it, and the turn it opens (consumer-state.ts openTurn). */
interface Hold {
  readonly skip?: undefined;
  readonly held: HeldState;
  readonly opening: Extract<Opening, { kind: 'open' }>;
  /** The lane key recorded with the rows, as the lock read it. */
  readonly recordedKey: string | null;
  readonly early: EarlyFetch | undefined;
}

/** What the turn fetched, and by which choice of ranges and stragglers. */
interface Fetched {
  readonly chosen: Extract<Opening, { kind: 'open' }>;
  readonly stored: StoredRange[];
  readonly rechecked: readonly GapRange[];
  readonly batch: TurnBatch;
  readonly filter: ReturnType<typeof fetchFilterOf>;
}

/**
 * Locks and reads the row, and opens the turn by it; or says why the turn ends here. Everything
 * read after the lock is decided by the row as held (docs/design.md §5).
 */
async function holdRow(
  turn: TurnScope,
  expectedCursor: bigint | undefined,
): Promise<Hold | { readonly skip: TurnOutcome }> {
  const { env, consumer, tx, limit, progress, rules } = turn;
  const { row, early } = lockWithEarlyFetch(env, consumer, tx, limit, expectedCursor);
  const locked = await row;
  if (!locked) return { skip: outcome({ skipped: 'locked' }) };
  // Another version of the consumer took its rows over (side effects, docs/design.md §12.3):
  // read once the row is held, so no turn of the old version runs after the switch commits.
  if (consumer.version !== null && locked.version !== null && locked.version !== consumer.version) {
    return { skip: outcome({ skipped: 'version' }) };
  }
  // Another deployment recorded another lane key with the rows (docs/design.md §11.1): lanes, and
  // a change of lane count, split the log by the recorded key, and this process's key would
  // deliver some events twice and pass others by; parked keys were computed under it. Read once
  // the row is held. (One lane's cursor means the same under any key.)
  const recorded = {
    instanceId: locked.instance_id,
    laneKey: locked.lane_key,
    changing: locked.lane_from !== null,
    parkedKeys: locked.parked_keys,
  };
  if (keptByAnotherKey(consumer.laneKey, recorded)) return { skip: outcome({ skipped: 'other-key' }) };
  const held = heldStateOf(locked);
  progress.heldXmin = held.rowXmin;
  const opening = openTurn(held, env.systemIdentifier, rules);
  if (opening.kind === 'skip') {
    if (opening.rearmExhausted) env.onRearmExhausted(consumer, held.state.lastError);
    return { skip: outcome({ skipped: opening.reason, held, dead: opening.reason === 'dead' }) };
  }
  return { held, opening, recordedKey: locked.lane_key, early };
}

/**
 * Replays an operator requested (docs/design.md §6), delivered first, out of order by nature; then
 * parked keys asked to replay, before this turn's events: a key whose parked events all go through
 * is unparked, and this turn's fetch (after it) delivers its later events. Whether parked keys were
 * replayed.
 */
async function deliverRequestedReplays(
  turn: TurnScope,
  held: HeldState,
  replaysPending: boolean,
): Promise<boolean> {
  const { env, consumer, tx, span, progress } = turn;
  progress.replaying = true;
  if (replaysPending) await deliverReplays(env, consumer, tx, span, (progress.claims ??= []));
  const replayLane = parkedReplayLane(consumer, held.laneChange);
  if (held.parkedReplays && replayLane) {
    await deliverParkedReplays(env, consumer, tx, span, replayLane, (progress.claims ??= []));
  }
  progress.replaying = false;
  return held.parkedReplays && replayLane !== null;
}

/**
 * The turn's events: the pending ranges and stragglers the row chose, fetched after the lock. The
 * fetch's snapshot may be newer than the row read's, by which they were chosen: chosen again by it,
 * and fetched again, until a fetch shows no ending the choice missed.
 */
async function fetchChosen(
  turn: TurnScope,
  { held, opening, early }: Hold,
  expectedCursor: bigint | undefined,
  replayedParked: boolean,
): Promise<Fetched> {
  const { env, consumer, tx, limit } = turn;
  const { state } = opening;
  let choice: FetchChoice = opening;
  let stored = await rangesChosen(env, consumer, tx, choice, state.cursor);
  let rechecked = fenced(stored, held.xid);
  const filter = fetchFilterOf(consumer, held.laneChange, limit, held.parkedKeys, unresolvedEventOf(state));
  let batch = await fetchTurnBatch(env, consumer, tx, {
    cursor: state.cursor,
    limit,
    rechecked,
    stragglers: choice.stragglers,
    // A turn with nothing to re-fetch reads only above its cursor: it may use the early fetch, or
    // share a read with the consumers at the same cursor. Not after replays: their handlers may
    // have appended through ctx.tx, and a read that sees those uncommitted events is this
    // transaction's alone, never another turn's.
    plain:
      stored.length === 0 &&
      !opening.clusterChanged &&
      choice.stragglers === undefined &&
      !state.replaysPending &&
      !replayedParked,
    // The early fetch went out before the row was read: not when the row says something it did
    // not know (replays, a change of lanes, which caps an old lane's fetch, parked keys that a
    // consumer not parking itself must read).
    early:
      !state.replaysPending &&
      !held.parkedReplays &&
      held.laneChange === null &&
      (consumer.parkKey || !held.parkedKeys) &&
      state.cursor === expectedCursor
        ? early
        : undefined,
    filter,
  });
  for (
    let again = choiceOvertaken(state, choice, batch.snapshots);
    again !== undefined;
    again = choiceOvertaken(state, choice, batch.snapshots)
  ) {
    choice = again;
    stored = await rangesChosen(env, consumer, tx, choice, state.cursor);
    rechecked = fenced(stored, held.xid);
    batch = await fetchTurnBatch(env, consumer, tx, {
      cursor: state.cursor,
      limit,
      rechecked,
      stragglers: choice.stragglers,
      plain: false,
      early: undefined,
      filter,
    });
  }
  return { chosen: { ...opening, ...choice }, stored, rechecked, batch, filter };
}

/** Plans the delivery by the row and the fetch (consumer-state.ts planDelivery), and carries it out. */
async function deliverPlanned(
  turn: TurnScope,
  { held, opening, recordedKey }: Hold,
  batch: TurnBatch,
  events: ReadonlyMap<bigint, EventRecord>,
  deliverable: readonly bigint[],
): Promise<{ plan: DeliveryPlan; result: DeliveryResult }> {
  const { env, consumer, tx, span, progress, rules } = turn;
  const { state } = opening;
  // An id with no event is a passed one (another lane's, a type not handled: turnInputOf).
  const unhandled = (id: bigint) => {
    if (id === state.skipEventId) return true;
    const event = events.get(id);
    return event === undefined || event.type === TOMBSTONE_TYPE;
  };
  const plan = planDelivery(held, state, opening.change === 'rearmed', deliverable, unhandled, rules);
  // The plan is most often the whole batch (then its events as fetched, stubs included).
  const toDeliver =
    plan.ids.length === batch.events.length && plan.ids[0] === batch.events[0]?.id
      ? batch.events
      : plan.ids.map((id) => events.get(id) ?? passedStub(id));
  // A process under another key than the recorded one (one lane) parks none: a key it computed
  // would mean nothing to the processes of the recorded key, which would deliver the key's later
  // events first (docs/design.md §11.1). Its exhausted event waits, failing, for one of them to
  // park it. (Skipping its turns instead would leave the consumer to nobody once the deployment
  // that recorded the key is rolled back.)
  const underAnotherKey = consumer.parkKey && isAnotherKey(consumer.laneKey, recordedKey);
  const parking = parkingOf(consumer, batch, underAnotherKey);
  const result = plan.crashedOut
    ? crashedOut(consumer, plan, toDeliver[0] as EventRecord, parking)
    : await startAndDeliver(env, consumer, tx, span, plan, toDeliver, unhandled, progress, {
        record: !cleanViewOf(held, progress.lastWrite),
        ...(parking ? { parking } : {}),
      });
  return { plan, result };
}

/**
 * Settles the gaps by what was delivered, persists them, and sends the row's next state
 * (consumer-state.ts closeTurn) as the turn's last writes; an old lane of a change of lane count
 * then takes its step (docs/design.md §11.3: barrier, switch, retire).
 */
async function closeAndWrite(
  turn: TurnScope,
  lastWrites: LastWrites,
  done: {
    readonly hold: Hold;
    readonly fetched: Fetched;
    readonly input: TurnInput;
    readonly deliverable: readonly bigint[];
    readonly plan: DeliveryPlan;
    readonly result: DeliveryResult;
  },
): Promise<TurnOutcome> {
  const { env, consumer, tx, span, progress } = turn;
  const { hold, fetched, input, deliverable, plan, result } = done;
  const { held, opening } = hold;
  const { state } = opening;
  const { batch, chosen, stored, filter } = fetched;
  // An old lane of a change of lane count reads nothing above the barrier (docs/design.md §11.3):
  // its turn has no more to do there, or a started dispatcher would turn it again and again while
  // it waits for the other old lanes. (It still reports the log's head: the events above the
  // barrier wait for the new lanes.)
  const cap = filter?.cap ?? null;
  const turnHead = cap !== null && batch.head > cap ? cap : batch.head;
  const resolvedIds = result.resolved.map((e) => e.id);
  // Another lane's events and types the consumer does not take are resolved without a handler:
  // not late deliveries of this row, whatever their ids.
  const passedOver = new Set(result.resolved.filter((e) => e.type === PASSED_TYPE).map((e) => e.id));
  let settlement = settleTurn(input, resolvedIds, passedOver);
  if (opening.clusterChanged) settlement = await clusterChanged(env, consumer, tx, state, settlement);
  const gapDelta = await persistRanges(tx, env.tables, consumer, stored, settlement.ranges, held.now);
  const pendingGaps = state.gapCount + gapDelta;
  const close = closeTurn(held, chosen, {
    input,
    deliverable,
    plan,
    settlement,
    delivered: deliveredOf(result, resolvedIds),
    head: turnHead,
    pendingRanges: pendingGaps,
  });
  await recordDelivery(env, consumer, tx, span, result, settlement);
  // The crash record: a start this turn recorded is taken off it; the crashes a crashed-out event
  // was ended with (dead letter, parked key, dead consumer) are cleared, they were its own.
  // Otherwise no handler ran on the crashes' account (an event set aside under a parked key,
  // passed, or waiting for a process of the recorded key): they stay, and travel on with the
  // isolation.
  const endedOnCrashes =
    plan.crashedOut &&
    (result.dead || result.failure === undefined) &&
    !result.parked.some((p) => p.error === null);
  lastWrites.writes = writeTurn(
    env,
    consumer,
    tx,
    close,
    gapDelta,
    progress.startSent ? 'start' : held.marker === null ? false : endedOnCrashes ? 'all' : 'none',
  );
  const laneStep =
    held.laneChange !== null && consumer.lane?.count === held.laneChange.from
      ? await settleLaneChange(env, consumer, tx, held.laneChange, {
          cursor: close.cursor,
          pendingGaps,
          healthy:
            close.status !== 'dead' &&
            close.attempts === 0 &&
            close.skipEventId === null &&
            (state.start === null || close.start === 'done'),
        })
      : undefined;
  if (laneStep === 'retired')
    return outcome({ handled: result.handled, failed: result.failed, retired: true });
  return outcome({
    handled: result.handled,
    failed: result.failed,
    hasMore: close.hasMore,
    filledBatch: close.filledBatch,
    pendingGaps,
    cursor: settlement.cursor,
    head: batch.head,
    dead: result.dead,
  });
}

/**
 * A turn's outcome: `fields` over a turn that did nothing. With `held`, a skipped turn reports the
 * row's cursor and pending ranges.
 */
function outcome(
  fields: Partial<Omit<TurnOutcome, 'skipped'>> & { skipped?: SkipReason; held?: HeldState },
): TurnOutcome {
  const { held, ...rest } = fields;
  return {
    handled: 0,
    failed: 0,
    skipped: undefined,
    hasMore: false,
    filledBatch: false,
    pendingGaps: held?.state.gapCount ?? 0,
    cursor: held?.state.cursor,
    head: undefined,
    dead: false,
    ...rest,
  };
}

/** The pending ranges `choice` re-fetches, as stored (none when it chose none). */
function rangesChosen(
  env: TurnEnvironment,
  consumer: ResolvedConsumer,
  tx: TransactionSql,
  choice: FetchChoice,
  cursor: bigint,
): Promise<StoredRange[]> {
  return choice.recheck
    ? selectRangesToRecheck(tx, env.tables, consumer.name, consumer.instanceId, choice.recheck, cursor)
    : Promise.resolve([]);
}

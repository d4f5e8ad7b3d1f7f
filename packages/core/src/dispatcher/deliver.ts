import type { Span, Tracer } from '@opentelemetry/api';
import type { HandlerContext } from '../consumers/consumer.js';
import { messageOf, sqlStateOf } from '../errors.js';
import type { EventRecord } from '../events.js';
import { attemptsCharged, type ResolvedConsumer } from '../options.js';
import type { DeadLetterInput } from '../queries/dead-letters.js';
import type { TransactionSql } from '../sql-types.js';
import type { DispatcherMetrics } from '../telemetry/metrics.js';
import { endSpanWithError, startHandlerSpan, withinSpan } from '../telemetry/tracing.js';
import { settleWithin, TIMED_OUT } from '../time-limit.js';
import { assertLive, isEnded, refusedStatements } from '../connections/guarded-transaction.js';

export interface DeliveryInput {
  readonly consumer: ResolvedConsumer;
  readonly tx: TransactionSql;
  readonly events: readonly EventRecord[];
  /** Failures already counted for an event (committed attempts plus crashed starts). */
  readonly priorAttempts: (eventId: bigint) => number;
  /**
   * The error of an event whose attempts are used up, to which the error policy applies without
   * another call (DeliveryPlan.spent); undefined for the others.
   */
  readonly spent?: (eventId: bigint) => string | undefined;
  /** Stop starting new handlers after this time (performance.now() ms); the turn commits what it did. */
  readonly deadlineMs: number;
  /** Stop starting new handlers once this says so (the dispatcher stops): the turn commits what it did. */
  readonly isStopping?: (() => boolean) | undefined;
  /** Events resolved without a handler call: operator skips, tombstones, another lane's events. */
  readonly resolvesUnhandled: (eventId: bigint) => boolean;
  /** A consumer whose error policy parks keys (docs/design.md §11.4). */
  readonly parking?: Parking;
  /**
   * Every event goes to `handler` on its own (replays, each its own attempt: a transactional
   * batchHandler's timeout would charge the first of them).
   */
  readonly oneByOne?: boolean;
  readonly tracer: Tracer;
  readonly turnSpan: Span;
  readonly metrics: DispatcherMetrics;
}

/**
 * Parked keys during a delivery: an event of a parked key is set aside (not handed to the handler);
 * an event that uses up its attempts parks its key, and the delivery goes on.
 */
export interface Parking {
  readonly keyOf: (event: EventRecord) => string | undefined;
  /** The keys parked so far: those parked before the turn, and those it parks. */
  readonly keys: Set<string>;
  /**
   * This process's laneKey is not the one recorded with the consumer's rows (another deployment's):
   * it parks no key (docs/design.md §11.1); an event that uses up its attempts waits, failing, for
   * a process of the recorded key (waitsForRecordedKey).
   */
  readonly underAnotherKey?: boolean;
}

/** An event set aside under its parked key; `error` on the one whose failure parked the key. */
export interface ParkedInput {
  readonly event: EventRecord;
  readonly key: string;
  readonly error: string | null;
  readonly attempts: number;
}

export interface HandlerFailure {
  readonly event: EventRecord;
  readonly error: unknown;
  /** Attempts on this event including this one. */
  readonly attempts: number;
}

export interface DeliveryResult {
  /** Events handled, or skipped into dead letters, in id order: the turn resolves these. */
  readonly resolved: readonly EventRecord[];
  readonly deadLetters: readonly DeadLetterInput[];
  /** Events set aside under a parked key (among `resolved`), in id order. */
  readonly parked: readonly ParkedInput[];
  /** The event the turn halted on (docs/design.md §4.4), if any. */
  readonly failure: HandlerFailure | undefined;
  /** The failure used up maxAttempts and skipApplyErrors is off. */
  readonly dead: boolean;
  readonly handled: number;
  readonly failed: number;
}

/**
 * A transactional handler overran its time while holding the turn's transaction: roll the turn
 * back. A `batchHandler`'s timeout is no attempt (as its failure is not): `failure.attempts` are the
 * first event's earlier ones, and `counted` is false.
 */
export class TransactionalHandlerTimeout extends Error {
  readonly failure: HandlerFailure & { readonly counted: boolean };

  constructor(failure: HandlerFailure, counted = true) {
    super(messageOf(failure.error));
    this.failure = { ...failure, counted };
  }
}

/**
 * Per consumer of this process, the last id of a transactional batch whose `batchHandler` timed
 * out: its events go one by one through `handler` until past it. (The next turn delivers the first
 * of them alone, and without this each later turn would try the batch again, one timeout per event
 * up to the one that hangs.)
 */
const batchTimedOutThrough = new WeakMap<ResolvedConsumer, bigint>();

class HandlerTimeoutError extends Error {
  constructor(ms: number) {
    super(`handler did not finish within ${ms} ms (handlerTimeoutMs)`);
    this.name = 'HandlerTimeoutError';
  }
}

/**
 * Delivers events in id order (docs/design.md §4.3 and §4.4): through batchHandler first when there is one
 * (falling back to one-by-one delivery when it throws), halting at the first failing event.
 * A transactional consumer's calls run in one savepoint for the batch (see inSavepoints).
 * @throws the turn's connection loss (an infrastructure failure, never a handler attempt)
 * @throws {TransactionAbandonedError} when the turn's transaction ended under it: no handler is called after that
 * @throws {TransactionalHandlerTimeout}
 */
export async function deliver(input: DeliveryInput): Promise<DeliveryResult> {
  const { consumer, events } = input;
  const resolved: EventRecord[] = [];
  const deadLetters: DeadLetterInput[] = [];
  const parked: ParkedInput[] = [];
  let handled = 0;
  let failed = 0;

  const batchHandler = consumer.definition.batchHandler;
  const toHandle = events.filter(
    (e) => !input.resolvesUnhandled(e.id) && setAsideKey(input, e) === undefined,
  );
  if (batchHandler && !input.oneByOne && toHandle.length > 1 && batchMayRun(input, toHandle)) {
    assertLive(input.tx);
    const attempt = Math.max(...toHandle.map((e) => input.priorAttempts(e.id))) + 1;
    const outcome = await invoke(input, toHandle, attempt, batchHandler);
    if (outcome.ok) {
      for (const event of events) {
        const key = input.resolvesUnhandled(event.id) ? undefined : setAsideKey(input, event);
        if (key !== undefined) parked.push({ event, key, error: null, attempts: 0 });
      }
      return {
        resolved: [...events],
        deadLetters,
        parked,
        failure: undefined,
        dead: false,
        handled: toHandle.length,
        failed: 0,
      };
    }
    // The whole batch was undone (savepoint) or must be assumed partly done: deliver one by one,
    // which pins the failing event (handlers are idempotent, docs/design.md §4.4); a transactional
    // consumer's calls in the batch's savepoints, as below.
    if (consumer.transactional) return inSavepoints(input);
  } else if (consumer.transactional && toHandle.length > 1) {
    // A savepoint per call would cost a round trip each, and a turn whose calls all write would
    // pile up a subtransaction per event: past 64 in one transaction, PostgreSQL's snapshots
    // overflow their subtransaction cache for every session of the cluster.
    return inSavepoints(input);
  }

  for (const event of events) {
    if (resolved.length > 0 && timeIsUp(input)) break;
    if (input.resolvesUnhandled(event.id)) {
      resolved.push(event);
      continue;
    }
    const asideKey = setAsideKey(input, event);
    if (asideKey !== undefined) {
      parked.push({ event, key: asideKey, error: null, attempts: 0 });
      resolved.push(event);
      continue;
    }
    assertLive(input.tx);
    const spent = spentError(input, event);
    const attempt = input.priorAttempts(event.id) + (spent ? 0 : 1);
    // A handler that returns no promise is settled without a microtask hop.
    const called = spent ? { ok: false as const, error: spent } : invoke(input, [event], attempt, undefined);
    const outcome = called instanceof Promise ? await called : called;
    if (outcome.ok) {
      resolved.push(event);
      handled += 1;
      continue;
    }
    failed += 1;
    const attempts = attemptsCharged(consumer, attempt, outcome.error, event);
    const failure: HandlerFailure = { event, error: outcome.error, attempts };
    if (attempts < consumer.maxAttempts)
      return { resolved, deadLetters, parked, failure, dead: false, handled, failed };
    const toPark = parkKey(input, event);
    if (toPark !== undefined && 'key' in toPark) {
      parked.push({ event, key: toPark.key, error: messageOf(outcome.error), attempts });
      resolved.push(event);
      continue;
    }
    if (!consumer.skipApplyErrors)
      return {
        resolved,
        deadLetters,
        parked,
        failure: unparked(failure, toPark),
        dead: !waitsForRecordedKey(toPark),
        handled,
        failed,
      };
    deadLetters.push({ event, reason: 'apply-error', error: messageOf(outcome.error), attempts });
    resolved.push(event);
  }
  return { resolved, deadLetters, parked, failure: undefined, dead: false, handled, failed };
}

/** Whether `toHandle` may go to the batchHandler: no spent event among them, no batch timed out over them. */
function batchMayRun(input: DeliveryInput, toHandle: readonly EventRecord[]): boolean {
  const timedOutThrough = batchTimedOutThrough.get(input.consumer);
  if (timedOutThrough !== undefined) {
    if ((toHandle[0] as EventRecord).id <= timedOutThrough) return false;
    batchTimedOutThrough.delete(input.consumer);
  }
  return !toHandle.some((e) => spentError(input, e));
}

/**
 * The error of an event whose attempts are used up and to which the error policy applies without
 * another call: its last attempt timed out in a transactional turn, which was rolled back with the
 * policy's dead letter or parked key (docs/design.md §4.4). Not in a process under another key than
 * the recorded one: that one parks nothing, and gives the event its call.
 */
function spentError(input: DeliveryInput, event: EventRecord): Error | undefined {
  if (input.parking?.underAnotherKey === true) return undefined;
  const message = input.spent?.(event.id);
  return message === undefined ? undefined : new Error(message);
}

/** The key `event` is set aside under: its key is parked. */
function setAsideKey(input: DeliveryInput, event: EventRecord): string | undefined {
  const parking = input.parking;
  if (parking === undefined || parking.keys.size === 0) return undefined;
  const key = parking.keyOf(event);
  return key !== undefined && parking.keys.has(key) ? key : undefined;
}

/**
 * The longest key Sluice parks, in UTF-8 bytes: an operator names a parked key to act on it, in at
 * most as many (docs/operating.md#parked-keys).
 */
export const MAX_PARKED_KEY_BYTES = 1000;

/** Why an event's key was not parked by a process under another laneKey than the recorded one. */
export const NOT_PARKED_UNDER_ANOTHER_KEY =
  "not parked: this process's laneKey is not the one recorded with the consumer's rows (another " +
  "deployment's), under which keys are parked; the event waits, retried, for a process that " +
  'declares the recorded key to park it (or for this process to be restarted: with no key parked, ' +
  'its start records its key)';

/**
 * What {@link parkKey} did: parked `key`, or found it `tooLong` (its bytes), or parked nothing under
 * `anotherKey` than the recorded one; undefined: no parking.
 */
type ToPark =
  { readonly key: string } | { readonly tooLong: number } | { readonly anotherKey: true } | undefined;

/**
 * Parks the key of `event`, which used up its attempts, when the consumer parks keys and the key
 * is not longer than {@link MAX_PARKED_KEY_BYTES} (a key from a data field can be: the consumer then
 * stops on the event as without parkKey, see {@link unparked}).
 */
function parkKey(input: DeliveryInput, event: EventRecord): ToPark {
  if (!input.consumer.parkKey || input.parking === undefined) return undefined;
  if (input.parking.underAnotherKey === true) return { anotherKey: true };
  const key = input.parking.keyOf(event);
  if (key === undefined) return undefined;
  const bytes = Buffer.byteLength(key);
  if (bytes > MAX_PARKED_KEY_BYTES) return { tooLong: bytes };
  input.parking.keys.add(key);
  return { key };
}

/**
 * An event whose key this process would park under another key than the recorded one: the
 * consumer is not ended on it (it would be for every deployment), it stays on the event past
 * maxAttempts. Each later turn gives it one more call (docs/design.md §4.4): a process of the
 * recorded key parks its key, one under another key fails it again, after the backoff.
 */
function waitsForRecordedKey(toPark: ToPark): boolean {
  return toPark !== undefined && 'anotherKey' in toPark;
}

/** The failure a consumer halts on, saying why its key was not parked when it was too long. */
function unparked(failure: HandlerFailure, toPark: ToPark): HandlerFailure {
  if (toPark === undefined || 'key' in toPark) return failure;
  const why =
    'tooLong' in toPark
      ? `its key (${toPark.tooLong} bytes) is too long to park (at most ${MAX_PARKED_KEY_BYTES} bytes): ` +
        'the consumer stops on this event'
      : NOT_PARKED_UNDER_ANOTHER_KEY;
  return { ...failure, error: new Error(`${messageOf(failure.error)} (${why})`, { cause: failure.error }) };
}

/**
 * A transactional consumer's events, their calls in one savepoint: one savepoint round trip for
 * the batch instead of one per event. When a call fails, the savepoint undoes the writes of every
 * call of the batch. The events before the failing one are then delivered again, in one savepoint
 * of their own (their first calls' writes are gone; a handler is idempotent: docs/design.md §4.4),
 * and the failing event is charged with the attempt it just failed, without a second call: its
 * writes are undone, the events before it commit once, and it is called once per attempt. Should
 * a call fail again while the events before it are delivered again, the earlier event is the one
 * the turn halts on. With skipApplyErrors, an event at maxAttempts goes to the dead letters and the
 * events after it are delivered the same way. A delivery again is not cut by maxTurnMs: it redoes
 * calls the turn already made within its time.
 * @throws as {@link deliver}
 */
async function inSavepoints(input: DeliveryInput): Promise<DeliveryResult> {
  const { consumer } = input;
  const resolved: EventRecord[] = [];
  const deadLetters: DeadLetterInput[] = [];
  const parked: ParkedInput[] = [];
  let handled = 0;
  let failed = 0;
  let rest = input.events;
  while (rest.length > 0) {
    if (resolved.length > 0 && timeIsUp(input)) break;
    let run = await inOneSavepoint(input, rest, true);
    let failure: SeriesFailure | undefined;
    while (run.failure) {
      failed += 1;
      failure = run.failure;
      run =
        failure.index === 0 ? NOTHING_RUN : await inOneSavepoint(input, rest.slice(0, failure.index), false);
    }
    resolved.push(...run.resolved);
    parked.push(...run.parked);
    handled += run.handled;
    if (!failure) break;
    const event = rest[failure.index] as EventRecord;
    const attempts = attemptsCharged(consumer, failure.attempts, failure.error, event);
    const halted: HandlerFailure = { event, error: failure.error, attempts };
    if (attempts < consumer.maxAttempts)
      return { resolved, deadLetters, parked, failure: halted, dead: false, handled, failed };
    const toPark = parkKey(input, event);
    if (toPark !== undefined && 'key' in toPark) {
      parked.push({ event, key: toPark.key, error: messageOf(failure.error), attempts });
      resolved.push(event);
      rest = rest.slice(failure.index + 1);
      continue;
    }
    if (!consumer.skipApplyErrors)
      return {
        resolved,
        deadLetters,
        parked,
        failure: unparked(halted, toPark),
        dead: !waitsForRecordedKey(toPark),
        handled,
        failed,
      };
    deadLetters.push({
      event,
      reason: 'apply-error',
      error: messageOf(failure.error),
      attempts,
    });
    resolved.push(event);
    rest = rest.slice(failure.index + 1);
  }
  return { resolved, deadLetters, parked, failure: undefined, dead: false, handled, failed };
}

/** The call of a series that failed: its index in the series, its error and its attempt. */
interface SeriesFailure {
  readonly index: number;
  readonly error: unknown;
  readonly attempts: number;
}

/** What one savepoint's series of calls did; with a failure, the savepoint undid all of it. */
interface SeriesRun {
  readonly resolved: readonly EventRecord[];
  /** Set aside under a parked key (among `resolved`). */
  readonly parked: readonly ParkedInput[];
  readonly handled: number;
  readonly failure?: SeriesFailure;
}

const NOTHING_RUN: SeriesRun = { resolved: [], parked: [], handled: 0 };

/** Thrown inside the series' savepoint to roll it back. */
class SeriesFailed extends Error {
  readonly failure: SeriesFailure;

  constructor(failure: SeriesFailure) {
    super('a call of the series failed');
    this.failure = failure;
  }
}

/**
 * Calls the handler for `events` in order, all in one savepoint, until one fails (the savepoint is
 * rolled back: the run is reported with its failure and nothing it did stands) or, with
 * `deadline`, the turn's time is up. The turn's own failures (a timeout, which rolls the turn
 * back, or its lost connection) are thrown, as in one-by-one delivery.
 */
async function inOneSavepoint(
  input: DeliveryInput,
  events: readonly EventRecord[],
  deadline: boolean,
): Promise<SeriesRun> {
  const { consumer } = input;
  const resolved: EventRecord[] = [];
  const parked: ParkedInput[] = [];
  let handled = 0;
  try {
    await input.tx.savepoint(async (savepoint) => {
      for (const [index, event] of events.entries()) {
        if (deadline && resolved.length > 0 && timeIsUp(input)) break;
        if (input.resolvesUnhandled(event.id)) {
          resolved.push(event);
          continue;
        }
        const asideKey = setAsideKey(input, event);
        if (asideKey !== undefined) {
          parked.push({ event, key: asideKey, error: null, attempts: 0 });
          resolved.push(event);
          continue;
        }
        assertLive(input.tx);
        const spent = spentError(input, event);
        if (spent) throw new SeriesFailed({ index, error: spent, attempts: input.priorAttempts(event.id) });
        const attempt = input.priorAttempts(event.id) + 1;
        const span = startHandlerSpan(input.tracer, input.turnSpan, consumer.name, consumer.instanceId, [
          event,
        ]);
        const started = performance.now();
        const context = new CallContext(consumer, attempt, savepoint);
        const refusedBefore = refusedStatements(input.tx).count;
        let run: Promise<unknown>;
        try {
          run = Promise.resolve(callHandler(consumer, [event], undefined, context, span));
        } catch (error) {
          // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- the handler's own throw, passed on
          run = Promise.reject(error);
        }
        try {
          if ((await settleWithin(run, consumer.handlerTimeoutMs)) === TIMED_OUT)
            throw new HandlerTimeoutError(consumer.handlerTimeoutMs);
          await checkStillUsable(input.tx, savepoint, refusedBefore);
        } catch (thrown) {
          const error = readable(thrown);
          context.abort(error);
          run.catch(() => undefined);
          endSpanWithError(span, error);
          const timedOut = error instanceof HandlerTimeoutError;
          input.metrics.handlerDuration(
            consumer.name,
            consumer.instanceId,
            (performance.now() - started) / 1000,
            timedOut ? 'timeout' : 'error',
          );
          input.metrics.failed(consumer.name, consumer.instanceId, 1);
          if (timedOut) throw new TransactionalHandlerTimeout({ event, error, attempts: attempt });
          throw new SeriesFailed({ index, error, attempts: attempt });
        }
        callSucceeded(input, span, started);
        resolved.push(event);
        handled += 1;
      }
    });
  } catch (error) {
    if (!(error instanceof SeriesFailed)) throw error;
    // If the turn's connection died with the call, that is the turn's failure, not the handler's
    // (which a connection error's code of the handler's own does not say: isEnded).
    if (isEnded(input.tx)) throw error.failure.error;
    return { resolved: [], parked: [], handled: 0, failure: error.failure };
  }
  return { resolved, parked, handled };
}

type Outcome = { ok: true } | { ok: false; error: unknown };

const OK: Outcome = { ok: true };

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    (typeof value === 'object' || typeof value === 'function') &&
    value !== null &&
    typeof (value as { then?: unknown }).then === 'function'
  );
}

/** A transactional handler went on after a statement of ctx.tx failed: its transaction was aborted. */
class AbortedTransactionError extends Error {
  constructor(refused: unknown) {
    super(
      `a statement of ctx.tx failed and the handler went on, but its transaction had been aborted (by PostgreSQL, or by the driver) ` +
        `(use ctx.tx.savepoint() to go on after a failed statement): ${messageOf(refused)}`,
    );
    this.name = 'AbortedTransactionError';
  }
}

/**
 * After a transactional call returned: if the server refused a statement of the transaction during
 * it (the handler caught the error), asks whether the transaction is still usable (a savepoint of
 * the handler's own may have undone the failure). An aborted one fails the call, inside its
 * savepoint, which is then rolled back: the attempt is the handler's, not the turn's
 * infrastructure failure. No round trip when nothing was refused.
 */
async function checkStillUsable(
  tx: TransactionSql,
  savepoint: TransactionSql,
  refusedBefore: number,
): Promise<void> {
  const refused = refusedStatements(tx);
  if (refused.count === refusedBefore) return;
  const swallowed = refused.last;
  try {
    await savepoint`select 1`;
  } catch (error) {
    if (sqlStateOf(error) === '25P02') throw new AbortedTransactionError(swallowed);
    throw error;
  }
}

/** What a handler call is told; `signal` is made on first use (most handlers never read it). */
class CallContext implements HandlerContext {
  readonly consumer: string;
  readonly version: number | undefined;
  readonly instanceId: string;
  readonly attempt: number;
  readonly tx: TransactionSql | undefined;
  #controller: AbortController | undefined;
  #abortedWith: { reason: unknown } | undefined;

  constructor(consumer: ResolvedConsumer, attempt: number, tx: TransactionSql | undefined) {
    this.consumer = consumer.baseName;
    this.version = consumer.version ?? undefined;
    this.instanceId = consumer.instanceId;
    this.attempt = attempt;
    this.tx = tx;
  }

  get signal(): AbortSignal {
    if (!this.#controller) {
      this.#controller = new AbortController();
      if (this.#abortedWith) this.#controller.abort(this.#abortedWith.reason);
    }
    return this.#controller.signal;
  }

  abort(reason: unknown): void {
    this.#abortedWith = { reason };
    this.#controller?.abort(reason);
  }
}

/**
 * Calls `batchHandler` with `events`, or the handler with the single event. Settles synchronously
 * when a non-transactional handler returns no promise or throws at once; a promise otherwise.
 */
function invoke(
  input: DeliveryInput,
  events: readonly EventRecord[],
  attempt: number,
  batchHandler: NonNullable<ResolvedConsumer['definition']['batchHandler']> | undefined,
): Outcome | Promise<Outcome> {
  const { consumer } = input;
  const span = startHandlerSpan(input.tracer, input.turnSpan, consumer.name, consumer.instanceId, events);
  const started = performance.now();
  if (consumer.transactional) {
    let context: CallContext | undefined;
    const run = input.tx.savepoint(async (savepoint) => {
      context = new CallContext(consumer, attempt, savepoint);
      const refusedBefore = refusedStatements(input.tx).count;
      const result = await callHandler(consumer, events, batchHandler, context, span);
      await checkStillUsable(input.tx, savepoint, refusedBefore);
      return result;
    });
    return settle(input, events, attempt, span, started, run, () => context);
  }
  const context = new CallContext(consumer, attempt, undefined);
  let result: unknown;
  try {
    result = callHandler(consumer, events, batchHandler, context, span);
  } catch (error) {
    return callFailed(input, events, attempt, span, started, readable(error), context, undefined);
  }
  if (isThenable(result))
    return settle(input, events, attempt, span, started, Promise.resolve(result), () => context);
  return callSucceeded(input, span, started);
}

function callHandler(
  consumer: ResolvedConsumer,
  events: readonly EventRecord[],
  batchHandler: NonNullable<ResolvedConsumer['definition']['batchHandler']> | undefined,
  context: HandlerContext,
  span: Span,
): unknown {
  // Under its handler span: the handler's own spans, and the traceparent of what it appends, follow.
  return withinSpan(span, () =>
    batchHandler
      ? batchHandler(events, context)
      : consumer.definition.handler(events[0] as EventRecord, context),
  );
}

/** Waits for a handler's promise within handlerTimeoutMs. */
async function settle(
  input: DeliveryInput,
  events: readonly EventRecord[],
  attempt: number,
  span: Span,
  started: number,
  run: Promise<unknown>,
  context: () => CallContext | undefined,
): Promise<Outcome> {
  const { consumer } = input;
  try {
    if ((await settleWithin(run, consumer.handlerTimeoutMs)) === TIMED_OUT)
      throw new HandlerTimeoutError(consumer.handlerTimeoutMs);
  } catch (error) {
    return callFailed(input, events, attempt, span, started, readable(error), context(), run);
  }
  return callSucceeded(input, span, started);
}

/**
 * What a handler threw, or, when its class cannot be looked at (a proxy whose getPrototypeOf trap
 * throws), an Error that says so: the turn asks its class (instanceof), and a throw there would fail
 * the turn as an infrastructure failure that is never counted, so the event would be retried for
 * ever. (Its message and code are read by messageOf and sqlStateOf, which never throw.)
 */
function readable(thrown: unknown): unknown {
  if ((typeof thrown !== 'object' && typeof thrown !== 'function') || thrown === null) return thrown;
  try {
    Reflect.getPrototypeOf(thrown);
    return thrown;
  } catch (error) {
    return new Error(`the handler threw a value that cannot be read (${messageOf(error)})`);
  }
}

function callSucceeded(input: DeliveryInput, span: Span, started: number): Outcome {
  const { consumer } = input;
  span.end();
  input.metrics.handlerDuration(
    consumer.name,
    consumer.instanceId,
    (performance.now() - started) / 1000,
    'ok',
  );
  return OK;
}

/**
 * Records a failed call. A transactional one also checks its turn: a timeout rolls the turn back,
 * a lost connection is the turn's infrastructure failure, not the handler's attempt.
 */
function callFailed(
  input: DeliveryInput,
  events: readonly EventRecord[],
  attempt: number,
  span: Span,
  started: number,
  error: unknown,
  context: CallContext | undefined,
  run: Promise<unknown> | undefined,
): Outcome | Promise<Outcome> {
  const { consumer, tx } = input;
  const timedOut = error instanceof HandlerTimeoutError;
  context?.abort(error);
  // A late settle of a timed-out handler must not surface as an unhandled rejection (H6).
  run?.catch(() => undefined);
  endSpanWithError(span, error);
  input.metrics.handlerDuration(
    consumer.name,
    consumer.instanceId,
    (performance.now() - started) / 1000,
    timedOut ? 'timeout' : 'error',
  );
  input.metrics.failed(consumer.name, consumer.instanceId, events.length === 1 ? 1 : 0);
  if (!consumer.transactional) return { ok: false, error };
  if (timedOut) {
    const first = events[0] as EventRecord;
    if (events.length === 1)
      throw new TransactionalHandlerTimeout({ event: first, error, attempts: attempt });
    batchTimedOutThrough.set(consumer, (events[events.length - 1] as EventRecord).id);
    throw new TransactionalHandlerTimeout(
      { event: first, error, attempts: input.priorAttempts(first.id) },
      false,
    );
  }
  // The savepoint was rolled back; if the turn's connection died with it, this is an
  // infrastructure failure of the turn, not the handler's attempt.
  if (isEnded(tx)) throw error;
  return tx`select 1`.then(() => ({ ok: false, error }));
}

/** Whether a delivery stops handing events to handlers: its turn's time is up, or the dispatcher stops. */
function timeIsUp(input: DeliveryInput): boolean {
  return performance.now() > input.deadlineMs || input.isStopping?.() === true;
}

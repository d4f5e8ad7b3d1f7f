import type { Span, Tracer } from '@opentelemetry/api';
import type { HandlerContext } from '../consumers/consumer.js';
import { messageOf } from '../errors.js';
import type { EventRecord } from '../events.js';
import type { ResolvedConsumer } from '../options.js';
import type { DeadLetterInput } from '../queries/dead-letters.js';
import type { TransactionSql } from '../sql-types.js';
import type { DispatcherMetrics } from '../telemetry/metrics.js';
import { endSpanWithError, startHandlerSpan } from '../telemetry/tracing.js';
import { settleWithin, TIMED_OUT } from '../time-limit.js';
import { isConnectionLoss } from './classify-failure.js';
import { assertTurnLive } from './turn-guard.js';

export interface DeliveryInput {
  readonly consumer: ResolvedConsumer;
  readonly tx: TransactionSql;
  readonly events: readonly EventRecord[];
  /** Failures already counted for an event (committed attempts plus crashed starts). */
  readonly priorAttempts: (eventId: bigint) => number;
  /** Stop starting new handlers after this time (performance.now() ms); the turn commits what it did. */
  readonly deadlineMs: number;
  /** Events resolved without a handler call: operator skips and tombstones. */
  readonly resolvesUnhandled: (event: EventRecord) => boolean;
  readonly tracer: Tracer;
  readonly turnSpan: Span;
  readonly metrics: DispatcherMetrics;
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
  /** The event the turn halted on (DESIGN §4.4), if any. */
  readonly failure: HandlerFailure | undefined;
  /** The failure used up maxAttempts and skipApplyErrors is off. */
  readonly dead: boolean;
  readonly handled: number;
  readonly failed: number;
}

/** A transactional handler overran its time while holding the turn's transaction: roll the turn back. */
export class TransactionalHandlerTimeout extends Error {
  readonly failure: HandlerFailure;

  constructor(failure: HandlerFailure) {
    super(messageOf(failure.error));
    this.failure = failure;
  }
}

class HandlerTimeoutError extends Error {
  constructor(ms: number) {
    super(`handler did not finish within ${ms} ms (handlerTimeoutMs)`);
    this.name = 'HandlerTimeoutError';
  }
}

/**
 * Delivers events in id order (DESIGN §4.3–4.4): through batchHandler first when there is one
 * (falling back to one-by-one delivery when it throws), halting at the first failing event.
 * Transactional consumers get each call in a savepoint, so a failure undoes only its own writes.
 * @throws the turn's connection loss (an infrastructure failure, never a handler attempt)
 * @throws {TurnAbandonedError} when the turn's transaction ended under it: no handler is called after that
 * @throws {TransactionalHandlerTimeout}
 */
export async function deliver(input: DeliveryInput): Promise<DeliveryResult> {
  const { consumer, events } = input;
  const resolved: EventRecord[] = [];
  const deadLetters: DeadLetterInput[] = [];
  let handled = 0;
  let failed = 0;

  const batchHandler = consumer.definition.batchHandler;
  const toHandle = events.filter((e) => !input.resolvesUnhandled(e));
  if (batchHandler && toHandle.length > 1) {
    assertTurnLive(input.tx);
    const attempt = Math.max(...toHandle.map((e) => input.priorAttempts(e.id))) + 1;
    const outcome = await invoke(input, toHandle, attempt, (context) => batchHandler(toHandle, context));
    if (outcome.ok) {
      return {
        resolved: [...events],
        deadLetters,
        failure: undefined,
        dead: false,
        handled: toHandle.length,
        failed: 0,
      };
    }
    // The whole batch was undone (savepoint) or must be assumed partly done: deliver one by one,
    // which pins the failing event (handlers are idempotent, DESIGN §4).
  }

  for (const event of events) {
    if (resolved.length > 0 && performance.now() > input.deadlineMs) break;
    if (input.resolvesUnhandled(event)) {
      resolved.push(event);
      continue;
    }
    assertTurnLive(input.tx);
    const attempt = input.priorAttempts(event.id) + 1;
    const outcome = await invoke(input, [event], attempt, (context) =>
      consumer.definition.handler(event, context),
    );
    if (outcome.ok) {
      resolved.push(event);
      handled += 1;
      continue;
    }
    failed += 1;
    const failure: HandlerFailure = { event, error: outcome.error, attempts: attempt };
    if (attempt < consumer.maxAttempts)
      return { resolved, deadLetters, failure, dead: false, handled, failed };
    if (!consumer.skipApplyErrors) return { resolved, deadLetters, failure, dead: true, handled, failed };
    deadLetters.push({ event, reason: 'apply-error', error: messageOf(outcome.error), attempts: attempt });
    resolved.push(event);
  }
  return { resolved, deadLetters, failure: undefined, dead: false, handled, failed };
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

async function invoke(
  input: DeliveryInput,
  events: readonly EventRecord[],
  attempt: number,
  call: (context: HandlerContext) => unknown,
): Promise<Outcome> {
  const { consumer, tx } = input;
  const span = startHandlerSpan(input.tracer, input.turnSpan, consumer.name, consumer.instanceId, events);
  const started = performance.now();
  // The signal is made on first use: most handlers never read it, and one per event adds up.
  let controller: AbortController | undefined;
  let abortedWith: { reason: unknown } | undefined;
  const signal = () => {
    if (!controller) {
      controller = new AbortController();
      if (abortedWith) controller.abort(abortedWith.reason);
    }
    return controller.signal;
  };
  const context = (handlerTx: TransactionSql | undefined): HandlerContext => ({
    consumer: consumer.name,
    instanceId: consumer.instanceId,
    attempt,
    get signal() {
      return signal();
    },
    tx: handlerTx,
  });
  // Undefined once a handler has returned no promise: it is done, with no timer to race.
  let run: Promise<unknown> | undefined;
  try {
    if (consumer.transactional) run = tx.savepoint((savepoint) => call(context(savepoint)));
    else {
      const result = call(context(undefined));
      if (isThenable(result)) run = Promise.resolve(result);
    }
    if (run && (await settleWithin(run, consumer.handlerTimeoutMs)) === TIMED_OUT)
      throw new HandlerTimeoutError(consumer.handlerTimeoutMs);
    span.end();
    input.metrics.handlerDuration(
      consumer.name,
      consumer.instanceId,
      (performance.now() - started) / 1000,
      'ok',
    );
    return OK;
  } catch (error) {
    const timedOut = error instanceof HandlerTimeoutError;
    abortedWith = { reason: error };
    controller?.abort(error);
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
    if (consumer.transactional) {
      if (timedOut) {
        const first = events[0] as EventRecord;
        throw new TransactionalHandlerTimeout({ event: first, error, attempts: attempt });
      }
      // The savepoint was rolled back; if the turn's connection died with it, this is an
      // infrastructure failure of the turn, not the handler's attempt.
      if (isConnectionLoss(error)) throw error;
      await tx`select 1`;
    }
    return { ok: false, error };
  }
}

// The delivery of a turn (dispatcher/turn.ts): the turn start recorded before it (crash
// accounting), the handler calls, an event the process died on too often, the replays an operator
// asked for, and what is recorded of it all (dead letters, logs, metrics).
import type { Span } from '@opentelemetry/api';
import type { Delivered, DeliveryPlan } from '../consumer-state/turn-machine.js';
import { messageOf } from '../errors.js';
import type { EventRecord } from '../events.js';
import type { Settlement } from '../gaps/gaps.js';
import type { ResolvedConsumer } from '../options.js';
import { recordDeadLetters } from '../queries/dead-letters.js';
import { finishReplays, selectRequestedReplays } from '../queries/replays.js';
import { recordTurnStart } from '../queries/turn-starts.js';
import type { TransactionSql } from '../sql-types.js';
import { ATTR } from '../telemetry/attributes.js';
import { deliver, type DeliveryResult } from './deliver.js';
import type { TurnEnvironment, TurnProgress } from './turn.js';

/** What the state machine needs to know of a delivery. */
export function deliveredOf(result: DeliveryResult): Delivered {
  const failure = result.failure && {
    eventId: result.failure.event.id,
    attempts: result.failure.attempts,
    message: messageOf(result.failure.error),
  };
  return { resolvedIds: result.resolved.map((e) => e.id), failure, dead: result.dead };
}

/**
 * The process died maxAttempts times on `event` (the plan's first): it is not handed to the
 * handler again. It goes to the dead letters with skipApplyErrors; otherwise the consumer is dead.
 */
export function crashedOut(
  consumer: ResolvedConsumer,
  plan: DeliveryPlan,
  event: EventRecord,
): DeliveryResult {
  const message = `the process stopped ${plan.crashes} time(s) while event ${event.id} was being handled`;
  const attempts = plan.priorAttempts(event.id);
  return consumer.skipApplyErrors
    ? {
        resolved: [event],
        failure: undefined,
        dead: false,
        handled: 0,
        failed: 1,
        deadLetters: [{ event, reason: 'apply-error', error: message, attempts }],
      }
    : {
        resolved: [],
        deadLetters: [],
        failure: { event, error: new Error(message), attempts },
        dead: true,
        handled: 0,
        failed: 1,
      };
}

/**
 * Records the turn start in a committed statement of its own (crash accounting), then delivers.
 * Without countCrashedAttempts, or with nothing to deliver, it only delivers.
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
): Promise<DeliveryResult> {
  const { options, tables: t } = env;
  const first = events[0];
  const last = events[events.length - 1];
  if (first && last && options.countCrashedAttempts) {
    await recordTurnStart(
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
  }
  return deliver({
    consumer,
    tx,
    events,
    priorAttempts: plan.priorAttempts,
    resolvesUnhandled: (event) => unhandled(event.id),
    deadlineMs: performance.now() + options.maxTurnMs,
    tracer: env.tracer,
    turnSpan: span,
    metrics: env.metrics,
  });
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
): Promise<void> {
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

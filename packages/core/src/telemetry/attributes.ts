/**
 * Every span and metric attribute Sluice emits, named once
 * (CONVENTIONS.md#comments-logs-and-telemetry-names).
 */
export const ATTR = {
  schema: 'sluice.schema',
  consumer: 'sluice.consumer.name',
  instance: 'sluice.consumer.instance_id',
  processed: 'sluice.turn.processed',
  failed: 'sluice.turn.failed',
  skipReason: 'sluice.turn.skip_reason',
  burnt: 'sluice.turn.gaps_burnt',
  passOutcome: 'sluice.pass.outcome',
  handlerOutcome: 'sluice.handler.outcome',
  failureCategory: 'sluice.failure.category',
  reregisteredFrom: 'sluice.consumer.reregistered_from',
  version: 'sluice.consumer.version',
  eventType: 'sluice.event.type',
  // OpenTelemetry messaging semantic conventions, where they fit.
  messagingSystem: 'messaging.system',
  messagingOperationType: 'messaging.operation.type',
  messagingOperationName: 'messaging.operation.name',
  messagingConsumerGroup: 'messaging.consumer.group.name',
  messagingDestination: 'messaging.destination.name',
  messagingMessageId: 'messaging.message.id',
  messagingBatchCount: 'messaging.batch.message_count',
} as const;

/**
 * Every metric Sluice records (listed with its unit and Prometheus name in docs/operating.md).
 *
 * OpenTelemetry names, dotted. A seconds-valued metric carries its unit in its last word
 * (`_seconds`, with the unit `s`): exporters that follow OpenTelemetry's Prometheus compatibility
 * rules append a unit suffix only when the name lacks it, and `@opentelemetry/exporter-prometheus`
 * appends none, so the Prometheus name is the same whichever exporter a user runs. Counts carry a
 * `{…}` annotation as their unit, which adds no suffix; counters get `_total` from the exporter,
 * so no name here ends in `total`.
 */
export const METRIC = {
  eventsProcessed: 'sluice.events.processed',
  eventsFailed: 'sluice.events.failed',
  eventsLate: 'sluice.events.late',
  handlerDuration: 'sluice.handler.duration_seconds',
  consumerLag: 'sluice.consumer.lag',
  consumerLagDuration: 'sluice.consumer.lag_seconds',
  consumerStagnation: 'sluice.consumer.stagnation_seconds',
  consumerDead: 'sluice.consumer.dead',
  rearmExhausted: 'sluice.consumer.rearm_exhausted',
  consumerReregistered: 'sluice.consumer.reregistered',
  gapsPending: 'sluice.gaps.pending',
  gapsOldestAge: 'sluice.gaps.oldest_age_seconds',
  gapsBurnt: 'sluice.gaps.burnt',
  keysParked: 'sluice.keys.parked',
  eventsParked: 'sluice.events.parked',
  rebuildLag: 'sluice.rebuild.lag',
  passes: 'sluice.passes',
  listenConnected: 'sluice.listen.connected',
} as const;

export const MESSAGING_SYSTEM = 'sluice';

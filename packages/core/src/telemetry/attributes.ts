/** Every span and metric attribute Sluice emits, named once (CONVENTIONS C10). */
export const ATTR = {
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

/** Every metric Sluice records, with its unit (CONVENTIONS C10; listed in docs/operating.md). */
export const METRIC = {
  eventsProcessed: 'sluice.events.processed',
  eventsFailed: 'sluice.events.failed',
  eventsLate: 'sluice.events.late',
  handlerDuration: 'sluice.handler.duration',
  consumerLag: 'sluice.consumer.lag',
  consumerLagDuration: 'sluice.consumer.lag.duration',
  consumerStagnation: 'sluice.consumer.stagnation',
  consumerDead: 'sluice.consumer.dead',
  rearmExhausted: 'sluice.consumer.rearm_exhausted',
  consumerReregistered: 'sluice.consumer.reregistered',
  gapsPending: 'sluice.gaps.pending',
  gapsOldestAge: 'sluice.gaps.oldest_age',
  gapsBurnt: 'sluice.gaps.burnt',
  passes: 'sluice.passes',
  listenConnected: 'sluice.listen.connected',
} as const;

export const MESSAGING_SYSTEM = 'sluice';

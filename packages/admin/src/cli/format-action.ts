import { parseLaneInstanceId } from '@sluice/core/internal';
import type { ConsumerSummary } from '../read-models.js';

/**
 * `lane 1 of 3` for the row of a lane of a consumer run as lanes (instance id `*1/3`,
 * docs/design.md §11.1); undefined for any other row (`*` included: a consumer of one lane).
 */
export function laneLabel(instanceId: string): string | undefined {
  const lane = parseLaneInstanceId(instanceId);
  return lane === null || lane.count === 1 ? undefined : `lane ${lane.index} of ${lane.count}`;
}

/** A row's instance id as tables show it: `*`, `lane 1 of 3`, or the instance's own id. */
export function instanceLabel(instanceId: string): string {
  return laneLabel(instanceId) ?? instanceId;
}

/** `mailer`, `mailer (lane 1 of 3)` for a lane's row, or `mailer (instance web-1)` for a per-instance row. */
export function consumerLabel(consumer: string, instanceId: string): string {
  if (instanceId === '*') return consumer;
  const lane = laneLabel(instanceId);
  return lane === undefined ? `${consumer} (instance ${instanceId})` : `${consumer} (${lane})`;
}

/** `, dead → idle` when the status changed, else nothing. */
export function statusChange(before: string, after: string): string {
  return before === after ? '' : `, ${before} → ${after}`;
}

/** A change of a consumer's lane count in progress (docs/design.md §11.3), in a line. */
export function laneChangeText(change: NonNullable<ConsumerSummary['laneChange']>): string {
  return change.switched
    ? `from ${change.from} to ${change.to} lanes, switched at the barrier ${change.barrier}; ` +
        'the old lanes go once their pending gaps are resolved'
    : `from ${change.from} to ${change.to} lanes, not switched yet: ` +
        `the old lanes deliver up to the barrier ${change.barrier}, then the new lanes go on from there`;
}

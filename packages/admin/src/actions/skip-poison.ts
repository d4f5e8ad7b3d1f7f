import { SkipMismatchError } from '@sluice/core';
import { applyOperatorChange, copySkippedEvent, skipEvent } from '@sluice/core/internal';
import {
  choosingLanes,
  lanesWhere,
  withLockedConsumer,
  type AdminContext,
  resultOf,
  type ActionOptions,
  type ActionResult,
} from '../context.js';
import { checkActor, checkEventId, checkName } from '../validate.js';

export interface SkipOptions extends ActionOptions {
  /** The event the consumer is stuck on (compare-and-set: any other id is refused). */
  readonly eventId: bigint;
}

/**
 * Skips the event a consumer is stuck on (docs/design.md §6.2): copies it into dead_letters and lets the
 * consumer's next turn pass it without calling the handler (the turn's gap logic then applies as
 * for any delivered event). A dead consumer becomes idle. Refuses any other event.
 * @throws {SkipMismatchError} @throws {ConsumerNotFoundError} @throws {ConsumerBusyError}
 */
export async function skip(
  ctx: AdminContext,
  nameInput: string,
  options: SkipOptions = {} as SkipOptions,
): Promise<ActionResult & { readonly eventId: bigint }> {
  const name = checkName(nameInput, 'name');
  const eventId = checkEventId(options.eventId);
  const who = checkActor(options, ctx.defaultActor);
  const skipOn = (lane: string | undefined) =>
    withLockedConsumer(ctx, name, lane, async ({ tx, state, instanceId }) => {
      const target = { name, instanceId, ...who };
      const change = skipEvent(name, state, eventId);
      if (!(await copySkippedEvent(tx, ctx.tables, target, eventId, state))) {
        throw new SkipMismatchError(name, eventId, null); // the event no longer exists (pruned)
      }
      await applyOperatorChange(tx, ctx.tables, target, change);
      return { ...resultOf(name, instanceId, change), eventId };
    });
  if (options.instanceId !== undefined) return skipOn(checkName(options.instanceId, 'instanceId'));
  // A laned consumer: the lane stuck on that event (it decides again once held); none stuck on it
  // is a mismatch.
  return choosingLanes(ctx, name, async () => {
    const lanes = await lanesWhere(ctx, name, { stuckOn: eventId });
    if (lanes === undefined) return skipOn(undefined);
    const lane = lanes[0];
    if (lane === undefined) throw new SkipMismatchError(name, eventId, null);
    return skipOn(lane);
  });
}

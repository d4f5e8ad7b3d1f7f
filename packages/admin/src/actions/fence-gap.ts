import {
  applyOperatorChange,
  fenceGap as fenceTransition,
  insertTombstone,
  isPendingGap,
} from '@sluice/core/internal';
import { withLockedConsumer, type AdminContext } from '../context.js';
import { optionalName } from '../read-models.js';
import { checkActor, checkEventId, checkName } from '../validate.js';
import { resultOf, type ActionOptions, type ActionResult } from './result.js';

export interface FenceOptions extends ActionOptions {
  /** An id inside one of the consumer's pending gap ranges. */
  readonly eventId: bigint;
}

/**
 * Gives up on one gap id for good (docs/design.md §5.7): inserts a tombstone event with that id, so a late
 * writer of it fails loudly on the primary key instead of its event being skipped silently, and
 * every consumer resolves the id without calling a handler. Refused while a transaction still owns
 * the id (its uncommitted insert), or when the id is not a pending gap of this consumer.
 * @throws {NotAGapError} @throws {GapHeldError} @throws {ConsumerNotFoundError} @throws {ConsumerBusyError}
 */
export async function fenceGap(
  ctx: AdminContext,
  nameInput: string,
  options: FenceOptions,
): Promise<ActionResult & { readonly eventId: bigint }> {
  const name = checkName(nameInput, 'name');
  const eventId = checkEventId(options.eventId);
  const who = checkActor(options, ctx.defaultActor);
  return withLockedConsumer(
    ctx,
    name,
    optionalName(options.instanceId),
    async ({ tx, state, instanceId }) => {
      const target = { name, instanceId, ...who };
      const change = fenceTransition(
        name,
        state,
        eventId,
        await isPendingGap(tx, ctx.tables, target, eventId),
      );
      await insertTombstone(tx, ctx.tables, target, eventId);
      await applyOperatorChange(tx, ctx.tables, target, change);
      return { ...resultOf(name, instanceId, change), eventId };
    },
  );
}

import {
  applyOperatorChange,
  fenceGap as fenceTransition,
  insertTombstone,
  isPendingGap,
} from '@sluice/core/internal';
import {
  choosingLanes,
  lanesWhere,
  withLockedConsumers,
  type AdminContext,
  combined,
  resultOf,
  type ActionOptions,
  type ActionResult,
} from '../context.js';
import { checkActor, checkEventId, checkName } from '../validate.js';

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
  options: FenceOptions = {} as FenceOptions,
): Promise<ActionResult & { readonly eventId: bigint }> {
  const name = checkName(nameInput, 'name');
  const eventId = checkEventId(options.eventId);
  const who = checkActor(options, ctx.defaultActor);
  const fenceOn = async (instances: string | readonly string[] | undefined) => {
    let tombstone = false;
    return withLockedConsumers(ctx, name, instances, async ({ tx, state, instanceId }) => {
      const target = { name, instanceId, ...who };
      const change = fenceTransition(
        name,
        state,
        eventId,
        await isPendingGap(tx, ctx.tables, target, eventId),
      );
      if (!tombstone) await insertTombstone(tx, ctx.tables, target, eventId);
      tombstone = true;
      await applyOperatorChange(tx, ctx.tables, target, change);
      return { ...resultOf(name, instanceId, change), eventId };
    });
  };
  // A laned consumer: every lane that holds the id pending (a hole is a gap of each lane that saw it).
  const results =
    options.instanceId !== undefined
      ? await fenceOn(checkName(options.instanceId, 'instanceId'))
      : await choosingLanes(ctx, name, async () => {
          const lanes = await lanesWhere(ctx, name, { gapHolds: eventId });
          return fenceOn(lanes !== undefined && lanes.length > 0 ? lanes : undefined);
        });
  return combined(results);
}

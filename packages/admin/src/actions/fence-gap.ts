import { GapHeldError, NotAGapError, TOMBSTONE_TYPE, sqlStateOf, writeAudit } from '@sluice/core';
import { withLockedConsumer, type AdminContext } from '../context.js';
import { optionalName } from '../read-models.js';
import { checkEventId, checkName, checkText } from '../validate.js';
import type { ActionOptions, ActionResult } from './result.js';

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
  const reason = checkText(options.reason, 'reason');
  const actor = checkText(options.actor, 'actor', 200) ?? ctx.defaultActor;
  const t = ctx.tables;
  return withLockedConsumer(ctx, name, optionalName(options.instanceId), async ({ tx, row, instanceId }) => {
    const [range] = await tx<{ from_id: string }[]>`
      select g.from_id::text from ${t.gaps} g
      where g.consumer_name = ${name} and g.instance_id = ${instanceId}
        and g.from_id <= ${eventId.toString()}::bigint and g.to_id >= ${eventId.toString()}::bigint`;
    if (!range) throw new NotAGapError(name, eventId, 'no pending range of the consumer contains it');
    try {
      // A savepoint keeps the operator's transaction usable if the insert fails.
      await tx.savepoint(
        (sp) => sp`
          insert into ${t.events} (id, stream_id, type, data, metadata) overriding system value
          values (${eventId.toString()}::bigint, '$sluice', ${TOMBSTONE_TYPE},
                  ${JSON.stringify({ fencedBy: actor, consumer: name, reason: reason ?? null })}::text::jsonb, '{}'::jsonb)`,
      );
    } catch (error) {
      const state = sqlStateOf(error);
      if (state === '23505')
        throw new NotAGapError(name, eventId, 'the event has committed meanwhile; the next turn delivers it');
      if (state === '55P03') throw new GapHeldError(eventId);
      throw error;
    }
    // The tombstone's writer is newer than every fence: tell each consumer waiting on this id to
    // look again, or its idle pre-check (which watches only older writers) would not notice it.
    await tx`
      update ${t.consumers} c set gaps_recheck = true, updated_at = now()
      where exists (select 1 from ${t.gaps} g
                    where g.consumer_name = c.name and g.instance_id = c.instance_id
                      and ${eventId.toString()}::bigint between g.from_id and g.to_id)`;
    const cursor = BigInt(row.cursor);
    await writeAudit(tx, t, {
      actor,
      action: 'fence',
      consumerName: name,
      instanceId,
      cursorBefore: cursor,
      cursorAfter: cursor,
      details: { eventId: eventId.toString(), reason: reason ?? null },
    });
    return {
      consumer: name,
      instanceId,
      action: 'fence',
      cursorBefore: cursor,
      cursorAfter: cursor,
      statusBefore: row.status,
      statusAfter: row.status,
      eventId,
    };
  });
}

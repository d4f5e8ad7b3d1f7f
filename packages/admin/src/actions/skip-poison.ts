import { SkipMismatchError, writeAudit } from '@sluice/core';
import { withLockedConsumer, type AdminContext } from '../context.js';
import { optionalName } from '../read-models.js';
import { checkEventId, checkName, checkText } from '../validate.js';
import type { ActionOptions, ActionResult } from './result.js';

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
  options: SkipOptions,
): Promise<ActionResult & { readonly eventId: bigint }> {
  const name = checkName(nameInput, 'name');
  const eventId = checkEventId(options.eventId);
  const reason = checkText(options.reason, 'reason');
  const actor = checkText(options.actor, 'actor', 200) ?? ctx.defaultActor;
  const t = ctx.tables;
  return withLockedConsumer(ctx, name, optionalName(options.instanceId), async ({ tx, row, instanceId }) => {
    const stuck = row.stuck_event_id === null ? null : BigInt(row.stuck_event_id);
    const isStuck = stuck !== null && (row.attempts > 0 || row.status === 'dead');
    if (!isStuck || stuck !== eventId) throw new SkipMismatchError(name, eventId, isStuck ? stuck : null);
    const copied = await tx`
      insert into ${t.deadLetters} (consumer_name, instance_id, event_id, stream_id, type, data, metadata,
                                    event_created_at, reason, error, attempts)
      select ${name}, ${instanceId}, e.id, e.stream_id, e.type, e.data, e.metadata, e.created_at,
             'operator-skip', ${row.last_error}, ${row.attempts}
      from ${t.events} e where e.id = ${eventId.toString()}::bigint
      on conflict (consumer_name, instance_id, event_id) do update set
        reason = excluded.reason, error = excluded.error, attempts = excluded.attempts, created_at = now(),
        replay_requested_at = null, replayed_at = null`;
    if (copied.count === 0) throw new SkipMismatchError(name, eventId, null);
    const statusAfter = row.status === 'dead' ? 'idle' : row.status;
    await tx`
      update ${t.consumers} set skip_event_id = ${eventId.toString()}::bigint, stuck_event_id = null, attempts = 0,
        status = ${statusAfter}, rearm_count = 0, updated_at = now()
      where name = ${name} and instance_id = ${instanceId}`;
    // Crash records of this event are moot now.
    await tx`delete from ${t.turnStarts} where consumer_name = ${name} and instance_id = ${instanceId}`;
    const cursor = BigInt(row.cursor);
    await writeAudit(tx, t, {
      actor,
      action: 'skip',
      consumerName: name,
      instanceId,
      cursorBefore: cursor,
      cursorAfter: cursor,
      details: {
        eventId: eventId.toString(),
        reason: reason ?? null,
        lastError: row.last_error,
        attempts: row.attempts,
      },
    });
    return {
      consumer: name,
      instanceId,
      action: 'skip',
      cursorBefore: cursor,
      cursorAfter: cursor,
      statusBefore: row.status,
      statusAfter,
      eventId,
    };
  });
}

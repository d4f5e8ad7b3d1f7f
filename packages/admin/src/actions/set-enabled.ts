import { InvalidOptionError, writeAudit } from '@sluice/core';
import { withLockedConsumer, type AdminContext } from '../context.js';
import { optionalName } from '../read-models.js';
import { checkName, checkText } from '../validate.js';
import type { ActionOptions, ActionResult } from './result.js';

export interface DisableOptions extends ActionOptions {
  /** Re-enable by itself at this time (a time-boxed disable). */
  readonly until?: Date;
}

/**
 * Stops the consumer's turns (its cursor waits, nothing is lost), for good or until a time.
 * @throws {InvalidOptionError} @throws {ConsumerNotFoundError} @throws {ConsumerBusyError}
 */
export async function disable(
  ctx: AdminContext,
  nameInput: string,
  options: DisableOptions = {},
): Promise<ActionResult> {
  const name = checkName(nameInput, 'name');
  const reason = checkText(options.reason, 'reason');
  const actor = checkText(options.actor, 'actor', 200) ?? ctx.defaultActor;
  const until = options.until;
  if (
    until !== undefined &&
    (!(until instanceof Date) || Number.isNaN(until.getTime()) || until.getTime() <= Date.now())
  ) {
    throw new InvalidOptionError('until', 'must be a valid time in the future');
  }
  const t = ctx.tables;
  return withLockedConsumer(ctx, name, optionalName(options.instanceId), async ({ tx, row, instanceId }) => {
    await tx`
      update ${t.consumers} set status = 'disabled', disabled_until = ${until ?? null}, disabled_reason = ${reason ?? null},
        updated_at = now()
      where name = ${name} and instance_id = ${instanceId}`;
    const cursor = BigInt(row.cursor);
    await writeAudit(tx, t, {
      actor,
      action: 'disable',
      consumerName: name,
      instanceId,
      cursorBefore: cursor,
      cursorAfter: cursor,
      details: { until: until?.toISOString() ?? null, reason: reason ?? null, statusBefore: row.status },
    });
    return {
      consumer: name,
      instanceId,
      action: 'disable',
      cursorBefore: cursor,
      cursorAfter: cursor,
      statusBefore: row.status,
      statusAfter: 'disabled',
    };
  });
}

/**
 * Lets a disabled consumer run again; on a dead one it is a manual re-arm (attempts and the
 * re-arm budget reset). @throws {ConsumerNotFoundError} @throws {ConsumerBusyError}
 */
export async function enable(
  ctx: AdminContext,
  nameInput: string,
  options: ActionOptions = {},
): Promise<ActionResult> {
  const name = checkName(nameInput, 'name');
  const reason = checkText(options.reason, 'reason');
  const actor = checkText(options.actor, 'actor', 200) ?? ctx.defaultActor;
  const t = ctx.tables;
  return withLockedConsumer(ctx, name, optionalName(options.instanceId), async ({ tx, row, instanceId }) => {
    const wasDead = row.status === 'dead';
    const statusAfter = row.status === 'disabled' || wasDead ? 'idle' : row.status;
    await tx`
      update ${t.consumers} set status = ${statusAfter}, disabled_until = null, disabled_reason = null,
        attempts = case when ${wasDead} then 0 else attempts end,
        rearm_count = case when ${wasDead} then 0 else rearm_count end,
        updated_at = now()
      where name = ${name} and instance_id = ${instanceId}`;
    const cursor = BigInt(row.cursor);
    await writeAudit(tx, t, {
      actor,
      action: 'enable',
      consumerName: name,
      instanceId,
      cursorBefore: cursor,
      cursorAfter: cursor,
      details: { reason: reason ?? null, statusBefore: row.status },
    });
    return {
      consumer: name,
      instanceId,
      action: 'enable',
      cursorBefore: cursor,
      cursorAfter: cursor,
      statusBefore: row.status,
      statusAfter,
    };
  });
}

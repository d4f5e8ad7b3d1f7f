import { InvalidOptionError, writeAudit } from '@sluice/core';
import { withLockedConsumer, type AdminContext } from '../context.js';
import { optionalName } from '../read-models.js';
import { checkName, checkText } from '../validate.js';
import type { ActionOptions, ActionResult } from './result.js';

export interface DisableOptions extends ActionOptions {
  /** Re-enable by itself at this time (a time-boxed disable); it must be in the database's future. */
  readonly until?: Date;
  /** Re-enable by itself this long from now, by the database's clock (excludes `until`). */
  readonly forMs?: number;
}

/** What a disable did: the action, and when the consumer re-enables by itself (null: never). */
export interface DisableResult extends ActionResult {
  readonly until: Date | null;
}

/**
 * Stops the consumer's turns (its cursor waits, nothing is lost), for good, until a time, or for a
 * while. The time is the database's: dispatchers judge a time-boxed disable by the database's
 * clock, so `until` must be in its future and `forMs` counts from its now (a skewed clock on the
 * operator's machine changes neither).
 * @throws {InvalidOptionError} @throws {ConsumerNotFoundError} @throws {ConsumerBusyError}
 */
export async function disable(
  ctx: AdminContext,
  nameInput: string,
  options: DisableOptions = {},
): Promise<DisableResult> {
  const name = checkName(nameInput, 'name');
  const reason = checkText(options.reason, 'reason');
  const actor = checkText(options.actor, 'actor', 200) ?? ctx.defaultActor;
  const { until: untilInput, forMs } = options;
  if (untilInput !== undefined && (!(untilInput instanceof Date) || Number.isNaN(untilInput.getTime()))) {
    throw new InvalidOptionError('until', 'must be a valid time');
  }
  if (forMs !== undefined && (!Number.isSafeInteger(forMs) || forMs < 1)) {
    throw new InvalidOptionError('forMs', 'must be a positive integer of milliseconds');
  }
  if (untilInput !== undefined && forMs !== undefined) {
    throw new InvalidOptionError('forMs', 'and until are mutually exclusive: give one of them');
  }
  const t = ctx.tables;
  return withLockedConsumer(ctx, name, optionalName(options.instanceId), async ({ tx, row, instanceId }) => {
    const [clock] = await tx<{ until: Date | null; future: boolean }[]>`
      select case when ${forMs ?? null}::float8 is not null
                  then statement_timestamp() + make_interval(secs => ${forMs ?? null}::float8 / 1000)
                  else ${untilInput ?? null}::timestamptz end as until,
             coalesce(${untilInput ?? null}::timestamptz > statement_timestamp(), true) as future`;
    if (!clock?.future) {
      throw new InvalidOptionError('until', "must be in the future (by the database's clock)");
    }
    const until = clock.until;
    await tx`
      update ${t.consumers} set status = 'disabled', disabled_until = ${until}, disabled_reason = ${reason ?? null},
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
      until,
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

import { InvalidOptionError } from '@sluice/core';
import { applyOperatorChange, disableConsumer, enableConsumer, readDisableEnd } from '@sluice/core/internal';
import {
  withLockedConsumers,
  type AdminContext,
  combined,
  resultOf,
  type ActionOptions,
  type ActionResult,
} from '../context.js';
import { checkActor, checkName, optionalName } from '../validate.js';

export interface DisableOptions extends ActionOptions {
  /** Re-enable by itself at this time (a time-boxed disable); it must be in the database's future. */
  readonly until?: Date;
  /** Re-enable by itself this long from now, by the database's clock (excludes `until`). */
  readonly forMs?: number;
}

/** The longest time-boxed disable (a year, as the ops route takes it); longer ones are disables for good. */
const LONGEST_FOR_MS = 31_536_000_000;
/** 9999-12-31T23:59:59.999Z: a time PostgreSQL and every client print alike. */
const LATEST_UNTIL_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999);
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
  const who = checkActor(options, ctx.defaultActor);
  const { until: untilInput, forMs } = options;
  if (
    untilInput !== undefined &&
    (!(untilInput instanceof Date) || !(untilInput.getTime() <= LATEST_UNTIL_MS))
  ) {
    throw new InvalidOptionError('until', 'must be a valid time before the year 10000');
  }
  // Long past, and maybe before the years PostgreSQL's timestamptz holds (4713 BC).
  if (untilInput !== undefined && untilInput.getTime() < 0) {
    throw new InvalidOptionError('until', "must be in the future (by the database's clock)");
  }
  if (forMs !== undefined && (!Number.isSafeInteger(forMs) || forMs < 1 || forMs > LONGEST_FOR_MS)) {
    throw new InvalidOptionError(
      'forMs',
      `must be a positive integer of milliseconds, at most ${LONGEST_FOR_MS} (a year)`,
    );
  }
  if (untilInput !== undefined && forMs !== undefined) {
    throw new InvalidOptionError('forMs', 'and until are mutually exclusive: give one of them');
  }
  const results = await withLockedConsumers(
    ctx,
    name,
    optionalName(options.instanceId),
    async ({ tx, state, instanceId }) => {
      const end = await readDisableEnd(tx, { forMs, until: untilInput });
      if (!end.future)
        throw new InvalidOptionError('until', "must be in the future (by the database's clock)");
      const change = disableConsumer(state, end.until, who.reason);
      await applyOperatorChange(tx, ctx.tables, { name, instanceId, ...who }, change);
      return { ...resultOf(name, instanceId, change), until: end.until };
    },
  );
  return combined(results);
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
  const who = checkActor(options, ctx.defaultActor);
  const results = await withLockedConsumers(
    ctx,
    name,
    optionalName(options.instanceId),
    async ({ tx, state, instanceId }) => {
      const change = enableConsumer(state);
      await applyOperatorChange(tx, ctx.tables, { name, instanceId, ...who }, change);
      return resultOf(name, instanceId, change);
    },
  );
  return combined(results);
}

import { InvalidOptionError } from '@sluice/core';
import {
  applyOperatorChange,
  readRestartFacts,
  restartConsumer,
  type RestartFrom,
} from '@sluice/core/internal';
import {
  withLockedConsumers,
  type AdminContext,
  combined,
  resultOf,
  type ActionOptions,
  type ActionResult,
} from '../context.js';
import { checkActor, checkEventId, checkName, optionalName } from '../validate.js';

export interface RestartOptions extends ActionOptions {
  /** 'beginning' (before every kept event), 'now' (the log head), or the id after which to continue. */
  readonly from: RestartFrom;
}

/**
 * Moves the cursor (docs/design.md §6.2): to the beginning, to now, or to a given id, and clears attempts,
 * pending gaps, crash records and the re-arm budget. A dead consumer becomes idle; a disabled one
 * stays disabled. Refuses to start below the retention floor (pruned events would be skipped).
 * @throws {InvalidOptionError} @throws {ConsumerNotFoundError} @throws {ConsumerBusyError}
 * @throws {BelowRetentionFloorError} @throws {BeyondHeadError}
 * @throws {LaneChangeInProgressError} during a change of lane count that has switched over
 */
export async function restart(
  ctx: AdminContext,
  nameInput: string,
  options: RestartOptions = {} as RestartOptions,
): Promise<ActionResult> {
  const name = checkName(nameInput, 'name');
  const from = options.from as unknown;
  if (
    from !== 'beginning' &&
    from !== 'now' &&
    !(from === 0n || (typeof from === 'bigint' && checkEventId(from, 'from')))
  ) {
    throw new InvalidOptionError('from', "must be 'beginning', 'now' or a bigint event id (0 or more)");
  }
  const who = checkActor(options, ctx.defaultActor);
  const results = await withLockedConsumers(
    ctx,
    name,
    optionalName(options.instanceId),
    async ({ tx, state, instanceId }) => {
      const facts = await readRestartFacts(
        tx,
        ctx.tables,
        ctx.schema,
        { name, instanceId },
        from === 'now' || from === 'beginning',
        ctx.lockTimeoutMs,
      );
      const change = restartConsumer(state, from, facts);
      await applyOperatorChange(tx, ctx.tables, { name, instanceId, ...who }, change);
      return resultOf(name, instanceId, change);
    },
  );
  return combined(results);
}

import { DeadLetterNotFoundError, InvalidOptionError } from '@sluice/core';
import {
  applyOperatorChange,
  missingDeadLetters,
  replayDeadLetters as replayTransition,
  requestReplays,
  selectReplays,
} from '@sluice/core/internal';
import { withLockedConsumers, type AdminContext, type ActionOptions } from '../context.js';
import { checkActor, checkLimit, checkName, optionalName } from '../validate.js';

export interface ReplayOptions extends ActionOptions {
  /** Dead-letter ids to replay (also ones replayed before). Default: those not replayed yet. */
  readonly ids?: readonly bigint[];
  /** At most this many, oldest first. @defaultValue 100 */
  readonly limit?: number;
  /** Count what would be replayed and change nothing. */
  readonly dryRun?: boolean;
}

export interface ReplayResult {
  readonly consumer: string;
  readonly instanceId: string;
  readonly dryRun: boolean;
  readonly count: number;
  readonly deadLetterIds: readonly bigint[];
}

/**
 * Asks for dead letters to be delivered again through the consumer's handler; the dispatcher
 * does it on the consumer's next turn (docs/design.md §6.2). A dry run only counts. An id that is
 * not one of the consumer's dead letters refuses the whole call and changes nothing.
 * @throws {InvalidOptionError} @throws {ConsumerNotFoundError} @throws {ConsumerBusyError}
 * @throws {DeadLetterNotFoundError}
 */
export async function replayDeadLetters(
  ctx: AdminContext,
  nameInput: string,
  options: ReplayOptions = {},
): Promise<ReplayResult> {
  const name = checkName(nameInput, 'name');
  const limit =
    options.limit === undefined && options.ids !== undefined ? options.ids.length : checkLimit(options.limit);
  const who = checkActor(options, ctx.defaultActor);
  const ids = options.ids === undefined ? undefined : (options.ids as unknown);
  if (ids !== undefined && (!Array.isArray(ids) || ids.length === 0 || ids.length > 1000)) {
    throw new InvalidOptionError('ids', 'must be a non-empty list of at most 1000 dead-letter ids');
  }
  // Dead-letter ids (not event ids): positive int8 values.
  const wanted = ids?.map((id: unknown) => {
    if (typeof id !== 'bigint' || id < 1n || id > 2n ** 63n - 1n) {
      throw new InvalidOptionError('ids', 'must hold dead-letter ids (positive bigints)');
    }
    return id;
  });
  const dryRun = options.dryRun ?? false;
  let left = limit;
  const results = await withLockedConsumers(
    ctx,
    name,
    optionalName(options.instanceId),
    async ({ tx, state, instanceId }) => {
      const target = { name, instanceId, ...who };
      const deadLetterIds =
        left > 0 ? await selectReplays(tx, ctx.tables, target, { ids: wanted, limit: left }) : [];
      left -= deadLetterIds.length;
      if (!dryRun && deadLetterIds.length > 0) {
        await requestReplays(tx, ctx.tables, deadLetterIds);
        await applyOperatorChange(tx, ctx.tables, target, replayTransition(state, deadLetterIds));
      }
      return { consumer: name, instanceId, dryRun, count: deadLetterIds.length, deadLetterIds };
    },
    // An id that is not one of this consumer's dead letters is a mistake: refuse them all.
    async (tx, done) => {
      if (wanted === undefined) return;
      const instances = done.map((r) => r.instanceId);
      const [missing] = await missingDeadLetters(tx, ctx.tables, name, instances, wanted);
      if (missing !== undefined) throw new DeadLetterNotFoundError(name, missing);
    },
  );
  // A laned consumer's lanes each replay their own dead letters; the result counts them all.
  const [first] = results;
  if (first === undefined || results.length === 1) return first as ReplayResult;
  const deadLetterIds = results.flatMap((r) => r.deadLetterIds);
  return { consumer: name, instanceId: '*', dryRun, count: deadLetterIds.length, deadLetterIds };
}

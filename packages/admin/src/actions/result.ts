import type { OperatorChange } from '@sluice/core/internal';

/** What an accepted operator action did (it is also in the audit table). */
export interface ActionResult {
  readonly consumer: string;
  readonly instanceId: string;
  readonly action: string;
  readonly cursorBefore: bigint;
  readonly cursorAfter: bigint;
  readonly statusBefore: string;
  readonly statusAfter: string;
  /** A consumer run as lanes: what the action did to each lane (the fields above are the first lane's). */
  readonly lanes?: readonly ActionResult[];
}

/** Options every action takes. */
export interface ActionOptions {
  /** Which cursor row of a per-instance consumer. */
  readonly instanceId?: string;
  /** Who acts, for the audit. @defaultValue the admin's defaultActor */
  readonly actor?: string;
  /** Free text kept in the audit. */
  readonly reason?: string;
}

/** The result of an action that carried out `change` on one consumer row. */
export function resultOf(consumer: string, instanceId: string, change: OperatorChange): ActionResult {
  return {
    consumer,
    instanceId,
    action: change.action,
    cursorBefore: change.cursorBefore,
    cursorAfter: change.cursorAfter,
    statusBefore: change.statusBefore,
    statusAfter: change.statusAfter,
  };
}

/** One result for an action carried out on each row of a consumer (its lanes), in row order. */
export function combined<T extends ActionResult>(results: readonly T[]): T {
  const [first] = results;
  if (first === undefined) throw new Error('an action on no row');
  return results.length === 1 ? first : { ...first, instanceId: '*', lanes: results };
}

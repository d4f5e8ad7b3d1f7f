// What a turn writes (dispatcher/turn.ts), each carrying out a decision of the consumer's state
// machine (consumer-state/turn-machine.ts): the status it opens with, the ranges, the row it ends
// with, and the audit of a cluster change.
import type { ConsumerState } from '../consumer-state/consumer-state.js';
import type { TurnClose, TurnRules } from '../consumer-state/turn-machine.js';
import type { GapRange, Settlement } from '../gaps/gaps.js';
import type { ResolvedConsumer, ResolvedOptions } from '../options.js';
import { SHARED_INSTANCE_ID } from '../options.js';
import { writeAudit } from '../queries/audit.js';
import { saveTurn, setStatus } from '../queries/consumers.js';
import { replaceRanges, type StoredRange } from '../queries/gaps.js';
import { finishTurnStart } from '../queries/turn-starts.js';
import type { Tables } from '../schema/tables.js';
import type { TransactionSql } from '../sql-types.js';
import type { TurnEnvironment } from './turn.js';

/** The state machine's view of a consumer's options. */
export function turnRules(consumer: ResolvedConsumer, options: ResolvedOptions): TurnRules {
  return {
    maxAttempts: consumer.maxAttempts,
    skipApplyErrors: consumer.skipApplyErrors,
    ordering: consumer.ordering,
    retryDelayMs: options.retryDelayMs,
    retryMaxDelayMs: options.retryMaxDelayMs,
    rearmCooldownMs: options.rearmCooldownMs,
    maxRearmCount: options.maxRearmCount,
    shared: consumer.instanceId === SHARED_INSTANCE_ID,
  };
}

/** Writes a status change the turn opens with (a time-boxed disable ended, a re-arm) and says so. */
export async function applyOpening(
  env: TurnEnvironment,
  consumer: ResolvedConsumer,
  tx: TransactionSql,
  change: 'reenabled' | 'rearmed',
  state: ConsumerState,
): Promise<void> {
  const { tables: t, logger, options } = env;
  if (change === 'reenabled') {
    await setStatus(tx, t, consumer.name, consumer.instanceId, { status: 'idle', clearDisable: true });
    logger.info({ consumer: consumer.name }, 'time-boxed disable expired; consumer enabled again');
    return;
  }
  await setStatus(tx, t, consumer.name, consumer.instanceId, { status: 'idle', rearm: true });
  logger.warn(
    { consumer: consumer.name, rearm: state.rearmCount, maxRearmCount: options.maxRearmCount },
    're-arming dead consumer after its cooldown',
  );
}

/**
 * After a restore onto another cluster (docs/design.md §5.8): the ranges this
 * fetch did not examine keep old-cluster fences, which mean nothing here; they are fenced afresh.
 * Audited and logged.
 */
export async function clusterChanged(
  env: TurnEnvironment,
  consumer: ResolvedConsumer,
  tx: TransactionSql,
  state: ConsumerState,
  settlement: Settlement,
): Promise<Settlement> {
  await writeAudit(tx, env.tables, {
    actor: 'sluice-dispatcher',
    action: 'cluster-changed',
    consumerName: consumer.name,
    instanceId: consumer.instanceId,
    cursorBefore: state.cursor,
    cursorAfter: settlement.cursor,
    details: {
      previousSystemIdentifier: state.systemIdentifier,
      systemIdentifier: env.systemIdentifier,
      burntRanges: settlement.burnt.length,
      burntIds: settlement.burntIdCount,
    },
  });
  env.logger.warn(
    { consumer: consumer.name, previous: state.systemIdentifier, current: env.systemIdentifier },
    'the database cluster changed (restore or failover to another cluster): pending gaps were resolved by one fresh fetch',
  );
  return { ...settlement, ranges: settlement.ranges.map((r) => ({ ...r, fence: null })) };
}

/**
 * Writes the row a turn ends with, and finishes its crash record (`finishStart`), behind one
 * another and not awaited: the COMMIT goes right behind them instead of a round trip later. The
 * returned promise is awaited once the COMMIT has answered (runTurn): should one of them fail,
 * PostgreSQL has aborted the transaction and answered the COMMIT with a rollback, which postgres.js
 * does not report as an error.
 */
export function writeTurn(
  env: TurnEnvironment,
  consumer: ResolvedConsumer,
  tx: TransactionSql,
  close: TurnClose,
  gapCountDelta: number,
  finishStart: boolean,
): Promise<unknown> {
  const { tables: t } = env;
  const saving = saveTurn(tx, t, consumer.name, consumer.instanceId, {
    ...close,
    gapCountDelta,
    systemIdentifier: env.systemIdentifier,
  });
  const writes = Promise.all([
    saving,
    finishStart ? finishTurnStart(tx, t, consumer.name, consumer.instanceId, close.keepIsolating) : undefined,
  ]);
  writes.catch(() => undefined);
  return writes;
}

/**
 * Writes the replacement of the rechecked ranges, touching only rows that changed. Returns the row
 * delta. A new hole is dated `now`, the database's clock (stored times follow the database).
 */
export async function persistRanges(
  tx: TransactionSql,
  t: Tables,
  consumer: ResolvedConsumer,
  stored: readonly StoredRange[],
  next: readonly GapRange[],
  now: Date,
): Promise<number> {
  const key = (r: GapRange) => `${r.from}:${r.to}:${r.fence ?? ''}`;
  const before = new Map(stored.map((r) => [key(r), r]));
  const after = new Set(next.map(key));
  const removeFroms = stored.filter((r) => !after.has(key(r))).map((r) => r.from);
  const add: StoredRange[] = next
    .filter((r) => !before.has(key(r)))
    .map((r) => ({ ...r, observedAt: containing(stored, r.from)?.observedAt ?? now }));
  if (removeFroms.length === 0 && add.length === 0) return 0;
  return replaceRanges(tx, t, consumer.name, consumer.instanceId, removeFroms, add);
}

function containing(ranges: readonly StoredRange[], id: bigint): StoredRange | undefined {
  let lo = 0;
  let hi = ranges.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >>> 1;
    const range = ranges[mid] as StoredRange;
    if (id < range.from) hi = mid - 1;
    else if (id > range.to) lo = mid + 1;
    else return range;
  }
  return undefined;
}

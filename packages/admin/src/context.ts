import {
  ConsumerBusyError,
  ConsumerNotFoundError,
  InvalidOptionError,
  type Sql,
  type TransactionSql,
} from '@sluice/core';
import {
  consumerStateOf,
  guardedBegin,
  lockConsumerForOperator,
  sqlStateOf,
  type ConsumerState,
  type OperatorRow,
  type Tables,
} from '@sluice/core/internal';

export interface AdminContext {
  readonly sql: Sql;
  readonly schema: string;
  readonly tables: Tables;
  readonly lockTimeoutMs: number;
  readonly rearmCooldownMs: number;
  readonly maxRearmCount: number;
  readonly defaultActor: string;
}

export interface LockedConsumer {
  readonly tx: TransactionSql;
  readonly row: OperatorRow;
  /** The row, parsed (what the operator transitions decide on). */
  readonly state: ConsumerState;
  readonly instanceId: string;
}

/**
 * Runs `action` in a transaction holding the consumer's row with the dispatcher's own lock
 * (docs/design.md §6.2): a running turn finishes first, bounded by lock_timeout, so an operator's change is
 * never undone by a turn's commit. A row held longer gives ConsumerBusyError and changes nothing.
 * @throws {ConsumerNotFoundError} @throws {ConsumerBusyError} @throws {InvalidOptionError}
 */
export async function withLockedConsumer<T>(
  ctx: AdminContext,
  name: string,
  instanceId: string | undefined,
  action: (locked: LockedConsumer) => Promise<T>,
): Promise<T> {
  try {
    return await guardedBegin(ctx.sql, async (tx) => {
      await tx`select set_config('lock_timeout', ${String(ctx.lockTimeoutMs)}, true)`;
      const instance = await resolveInstance(tx, ctx, name, instanceId);
      const row = await lockConsumerForOperator(tx, ctx.tables, name, instance);
      if (!row) throw new ConsumerNotFoundError(name, instanceId);
      return action({ tx, row, state: consumerStateOf(row), instanceId: instance });
    });
  } catch (error) {
    if (sqlStateOf(error) === '55P03') throw new ConsumerBusyError(name, ctx.lockTimeoutMs);
    throw error;
  }
}

/**
 * Which cursor row an action means: the given instance, else the shared row, else the only
 * per-instance row. Several per-instance rows and no instanceId is ambiguous.
 */
export async function resolveInstance(
  tx: TransactionSql | Sql,
  ctx: AdminContext,
  name: string,
  instanceId: string | undefined,
): Promise<string> {
  const rows = await tx<{ instance_id: string }[]>`
    select instance_id from ${ctx.tables.consumers} where name = ${name} order by instance_id`;
  const instances = rows.map((r) => r.instance_id);
  if (instanceId !== undefined) {
    if (!instances.includes(instanceId)) throw new ConsumerNotFoundError(name, instanceId);
    return instanceId;
  }
  if (instances.length === 0) throw new ConsumerNotFoundError(name);
  if (instances.includes('*')) return '*';
  if (instances.length === 1) return instances[0] as string;
  throw new InvalidOptionError(
    'instanceId',
    `is required: consumer "${name}" has a cursor per instance (${instances.join(', ')})`,
  );
}

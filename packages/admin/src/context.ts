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
  pgArray,
  refuseRetiredRows,
  sqlStateOf,
  type ConsumerState,
  type OperatorChange,
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
 * A retired version's rows are refused (they never run again).
 * @throws {ConsumerNotFoundError} @throws {ConsumerBusyError} @throws {InvalidOptionError}
 * @throws {RebuildStateError}
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
      const held = await hold(tx, ctx, name, instance);
      if (!held) throw new ConsumerNotFoundError(name, instanceId);
      // Asked once the row is held: a takeover that retires it has committed, or waits for us.
      await refuseRetiredRows(tx, ctx.tables, name);
      return action({ tx, ...held });
    });
  } catch (error) {
    if (sqlStateOf(error) === '55P03') throw new ConsumerBusyError(name, ctx.lockTimeoutMs);
    throw error;
  }
}

/**
 * Runs `action` on every row an action on `name` means (see {@link resolveInstances}), in one
 * transaction, each row held with the dispatcher's own lock before its action runs (in instance id
 * order, as every multi-row lock here takes them). A refused row refuses them all: nothing changes.
 * @throws {ConsumerNotFoundError} @throws {ConsumerBusyError} @throws {InvalidOptionError}
 */
export async function withLockedConsumers<T>(
  ctx: AdminContext,
  name: string,
  instanceId: string | readonly string[] | undefined,
  action: (locked: LockedConsumer) => Promise<T>,
  /** Runs in the same transaction after every row's action; a throw here rolls them all back. */
  settle?: (tx: TransactionSql, results: readonly T[]) => Promise<void>,
): Promise<T[]> {
  try {
    return await guardedBegin(ctx.sql, async (tx) => {
      await tx`select set_config('lock_timeout', ${String(ctx.lockTimeoutMs)}, true)`;
      const locked =
        instanceId === undefined
          ? await lockWholeConsumer(tx, ctx, name)
          : await lockEach(
              tx,
              ctx,
              name,
              typeof instanceId === 'object'
                ? await inInstanceIdOrder(tx, instanceId)
                : await resolveInstances(tx, ctx, name, instanceId),
            );
      // Asked once the rows are held: a takeover that retires them has committed, or waits for us.
      await refuseRetiredRows(tx, ctx.tables, name);
      const results: T[] = [];
      for (const one of locked) results.push(await action({ tx, ...one }));
      await settle?.(tx, results);
      return results;
    });
  } catch (error) {
    if (sqlStateOf(error) === '55P03') throw new ConsumerBusyError(name, ctx.lockTimeoutMs);
    throw error;
  }
}

type Held = Omit<LockedConsumer, 'tx'>;

/** Each named row, held; a row that is not there refuses them all. */
async function lockEach(
  tx: TransactionSql,
  ctx: AdminContext,
  name: string,
  instances: readonly string[],
): Promise<Held[]> {
  const held: Held[] = [];
  for (const instance of instances) {
    const one = await hold(tx, ctx, name, instance);
    if (!one) throw new ConsumerNotFoundError(name, instance);
    held.push(one);
  }
  return held;
}

/** The row, held with the dispatcher's own lock, and parsed; undefined when it is not there. */
async function hold(
  tx: TransactionSql,
  ctx: AdminContext,
  name: string,
  instanceId: string,
): Promise<Held | undefined> {
  const row = await lockConsumerForOperator(tx, ctx.tables, name, instanceId);
  return row ? { row, state: consumerStateOf(row), instanceId } : undefined;
}

/**
 * Every row of the consumer as a whole, held. The rows can change between reading which they are
 * and holding them: a change of lane count retires its old lanes and its new lanes start
 * (docs/design.md §11.3). So a row gone by the time it is held is passed over, and the rows are read
 * again once all are held: they are the ones held, or the new ones are held too and it reads again.
 */
async function lockWholeConsumer(tx: TransactionSql, ctx: AdminContext, name: string): Promise<Held[]> {
  const held = new Map<string, Held>();
  let wanted = await resolveInstances(tx, ctx, name, undefined);
  for (let round = 1; ; round++) {
    for (const instance of wanted) {
      if (held.has(instance)) continue;
      const one = await hold(tx, ctx, name, instance);
      if (one) held.set(instance, one);
    }
    const now = await resolveInstances(tx, ctx, name, undefined);
    for (const instance of held.keys()) if (!now.includes(instance)) held.delete(instance);
    if (now.every((instance) => held.has(instance))) return now.map((instance) => held.get(instance) as Held);
    // Rows keep coming and going: a change of lanes under way. Nothing was changed yet.
    if (round === 5) throw new ConsumerBusyError(name, ctx.lockTimeoutMs, true);
    wanted = now;
  }
}

/**
 * `ids` sorted as PostgreSQL sorts the instance_id column (the database's collation), not as
 * JavaScript sorts strings: under a collation such as en_US the two put lane ids such as `*1/16`
 * and `*10/16` in opposite order, and a lock taken out of the column's order could wait on a turn's
 * lock in a cycle.
 */
async function inInstanceIdOrder(tx: TransactionSql, ids: readonly string[]): Promise<string[]> {
  const rows = await tx<{ id: string }[]>`
    select id from unnest(${pgArray(ids)}::text[]) as id order by id`;
  return rows.map((r) => r.id);
}

/**
 * @throws {ConsumerNotFoundError} when no row of the consumer is registered (for what belongs to a
 * consumer's name, not to one of its rows: its parked keys)
 */
export async function assertRegistered(
  tx: TransactionSql | Sql,
  ctx: AdminContext,
  name: string,
): Promise<void> {
  const [row] = await tx`select 1 from ${ctx.tables.consumers} where name = ${name} limit 1`;
  if (!row) throw new ConsumerNotFoundError(name);
}

/**
 * Every cursor row an action on the consumer as a whole means: the given instance; else a shared
 * consumer's rows (its '*' row, or each of its lanes, docs/design.md §11, the old lanes too while a
 * change of its lane count drains), in instance id order; else its only per-instance row.
 * Several per-instance rows and no instanceId is ambiguous.
 */
export async function resolveInstances(
  tx: TransactionSql | Sql,
  ctx: AdminContext,
  name: string,
  instanceId: string | undefined,
): Promise<string[]> {
  const rows = await tx<{ instance_id: string }[]>`
    select instance_id from ${ctx.tables.consumers} where name = ${name} order by instance_id`;
  const instances = rows.map((r) => r.instance_id);
  if (instanceId !== undefined) {
    if (!instances.includes(instanceId)) throw new ConsumerNotFoundError(name, instanceId);
    return [instanceId];
  }
  if (instances.length === 0) throw new ConsumerNotFoundError(name);
  const shared = instances.filter((id) => id.startsWith('*'));
  if (shared.length > 0) return shared;
  if (instances.length === 1) return instances;
  throw new InvalidOptionError(
    'instanceId',
    `is required: consumer "${name}" has a cursor per instance (${instances.join(', ')})`,
  );
}

/**
 * Which cursor row an action means: the given instance, else the shared row, else the only
 * per-instance row. Several per-instance rows and no instanceId is ambiguous, and so are the lanes
 * of a laned consumer (an action on one lane names it: `*k/N`).
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
  const lanes = instances.filter((id) => id.startsWith('*'));
  if (lanes.length > 0) {
    throw new InvalidOptionError(
      'instanceId',
      `is required: consumer "${name}" runs as lanes (${lanes.join(', ')}); name one`,
    );
  }
  throw new InvalidOptionError(
    'instanceId',
    `is required: consumer "${name}" has a cursor per instance (${instances.join(', ')})`,
  );
}

/** How many times an action chooses its lanes when a change of lane count moves them under it. */
const LANE_CHOICES = 5;

/**
 * Runs `attempt`, which chooses lanes without a lock and then holds them. A change of lane count
 * can remove a lane, or hand its keys to a new one, between the choice and the lock
 * (docs/design.md §11.3): an attempt whose chosen lane is gone once held (ConsumerNotFoundError
 * naming a lane), or that answers `undefined` (what it chose has moved), chooses again, up to five
 * times; the last attempt is told so. Lanes still moving then give ConsumerBusyError: nothing was
 * changed.
 */
export async function choosingLanes<T>(
  ctx: AdminContext,
  name: string,
  attempt: (last: boolean) => Promise<T | undefined>,
): Promise<T> {
  for (let round = 1; ; round++) {
    const last = round >= LANE_CHOICES;
    try {
      const result = await attempt(last);
      if (result !== undefined) return result;
    } catch (error) {
      if (!(error instanceof ConsumerNotFoundError) || !isLane(error.instanceId)) throw error;
    }
    if (last) throw new ConsumerBusyError(name, ctx.lockTimeoutMs, true);
  }
}

function isLane(instanceId: string | undefined): boolean {
  return instanceId !== undefined && instanceId.startsWith('*');
}

/**
 * The lanes of a laned consumer (docs/design.md §11) whose row matches `where` (read without a
 * lock, to choose which rows an action locks: the action decides again once they are held), or
 * undefined when the consumer has no lanes.
 */
export async function lanesWhere(
  ctx: AdminContext,
  name: string,
  where: { readonly stuckOn?: bigint; readonly gapHolds?: bigint },
): Promise<string[] | undefined> {
  const lanes = await ctx.sql<{ instance_id: string; stuck_event_id: string | null; holds: boolean }[]>`
    select c.instance_id, c.stuck_event_id::text as stuck_event_id,
           exists (select 1 from ${ctx.tables.gaps} g
                   where g.consumer_name = c.name and g.instance_id = c.instance_id
                     and ${where.gapHolds?.toString() ?? null}::bigint between g.from_id and g.to_id) as holds
    from ${ctx.tables.consumers} c
    where c.name = ${name} and c.instance_id like '*%/%'
    order by c.instance_id`;
  if (lanes.length === 0) return undefined;
  return lanes
    .filter(
      (l) =>
        (where.stuckOn === undefined || l.stuck_event_id === where.stuckOn.toString()) &&
        (where.gapHolds === undefined || l.holds),
    )
    .map((l) => l.instance_id);
}

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

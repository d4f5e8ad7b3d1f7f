// Versions of a consumer and their rebuilds (docs/design.md §12): registered from what processes
// declare, rebuilt beside the live version, taken over at a barrier, paused, abandoned, dropped.
import { guardedBegin } from '../connections/guarded-transaction.js';
import {
  BeyondHeadError,
  ConsumerNotFoundError,
  InvalidOptionError,
  RebuildNotFoundError,
  RebuildNotReadyError,
  RebuildStateError,
} from '../errors.js';
import type { Tables } from '../schema/tables.js';
import type { Queryable, Sql, TransactionSql } from '../sql-types.js';
import { beginningOf, logHead, retentionFloor, writeAudit } from './audit.js';
import { LANES_LOCK_CLASS } from './lanes.js';
import { pgArray } from './pg-array.js';

export type VersionState =
  'rebuilding' | 'paused' | 'waiting' | 'taking-over' | 'live' | 'retired' | 'abandoned' | 'dropped';

/** States whose rows a process that declares the version turns. */
export const RUNNING_STATES: ReadonlySet<VersionState> = new Set(['rebuilding', 'taking-over', 'live']);
/** States of the one version a consumer may have on its way to take over. */
const NEXT_STATES = ['rebuilding', 'paused', 'waiting', 'taking-over'] as const;

/** How far behind the log head an operator may approve a takeover without force, by default. */
export const APPROVE_WITHIN_DEFAULT = 1_000n;

export interface VersionRow {
  readonly consumerName: string;
  readonly version: number;
  readonly state: VersionState;
  readonly rowName: string;
  readonly sideEffects: boolean;
  readonly startPosition: bigint;
  readonly takeoverWithin: bigint | null;
  readonly barrier: bigint | null;
  readonly viewName: string | null;
  readonly viewSource: string | null;
  readonly changedBy: string | null;
  readonly createdAt: Date;
  readonly stateChangedAt: Date;
}

interface VersionDbRow {
  consumer_name: string;
  version: number;
  state: VersionState;
  row_name: string;
  side_effects: boolean;
  start_position: string;
  takeover_within: string | null;
  barrier: string | null;
  view_name: string | null;
  view_source: string | null;
  changed_by: string | null;
  created_at: Date;
  state_changed_at: Date;
}

const VERSION_COLUMNS = (q: Queryable) => q`
  consumer_name, version, state, row_name, side_effects, start_position::text as start_position,
  takeover_within::text as takeover_within, barrier::text as barrier, view_name, view_source,
  changed_by, created_at, state_changed_at`;

function versionOf(row: VersionDbRow): VersionRow {
  return {
    consumerName: row.consumer_name,
    version: row.version,
    state: row.state,
    rowName: row.row_name,
    sideEffects: row.side_effects,
    startPosition: BigInt(row.start_position),
    takeoverWithin: row.takeover_within === null ? null : BigInt(row.takeover_within),
    barrier: row.barrier === null ? null : BigInt(row.barrier),
    viewName: row.view_name,
    viewSource: row.view_source,
    changedBy: row.changed_by,
    createdAt: row.created_at,
    stateChangedAt: row.state_changed_at,
  };
}

/**
 * Refuses an operator's change to the rows of a retired version (docs/design.md §12.4): they never
 * run again, so a restart or an enable would only make them look alive.
 * @throws {RebuildStateError} naming the live version's rows
 */
export async function refuseRetiredRows(q: Queryable, t: Tables, rowName: string): Promise<void> {
  // A row is its version's by its own `version`: a version with side effects takes the rows over,
  // and its retired predecessor has the same row name.
  const [retired] = await q<{ consumer_name: string; version: number; live_row: string | null }[]>`
    select v.consumer_name, v.version,
           (select l.row_name from ${t.consumerVersions} l
            where l.consumer_name = v.consumer_name and l.state = 'live') as live_row
    from ${t.consumers} c
    join ${t.consumerVersions} v on v.row_name = c.name and v.version = c.version
    where c.name = ${rowName} and v.state = 'retired'
    limit 1`;
  if (retired === undefined) return;
  throw new RebuildStateError(
    retired.consumer_name,
    retired.version,
    'retired',
    `its rows ("${rowName}") never run again; act on the live version's rows${
      retired.live_row === null ? '' : ` ("${retired.live_row}")`
    }, or drop it`,
  );
}

/** Every version of the consumers named (all consumers when `names` is undefined), by version. */
export async function selectVersions(
  q: Queryable,
  t: Tables,
  names?: readonly string[],
): Promise<VersionRow[]> {
  const rows = await q<VersionDbRow[]>`
    select ${VERSION_COLUMNS(q)} from ${t.consumerVersions}
    where ${names === undefined ? q`true` : q`consumer_name = any(${pgArray(names)}::text[])`}
    order by consumer_name, version`;
  return rows.map(versionOf);
}

/** A version a process declares (Consumer.version), as registration needs it. */
export interface DeclaredVersion {
  readonly name: string;
  readonly version: number;
  readonly rowName: string;
  readonly sideEffects: boolean;
  readonly startPosition: bigint;
  readonly takeoverWithin: bigint | null;
  readonly view: { readonly view: string; readonly source: string } | null;
  /** Where it was declared (`consumers[i]`), for the option a refusal names. */
  readonly option: string;
}

/**
 * Records the versions a process declares, under registration's lock (docs/design.md §12.1). A
 * consumer's first declared versions: the lowest is live (version 1 when the consumer already has
 * rows from before it was versioned). A version above the live one starts a rebuild (or, with side
 * effects, waits to take the rows over); it replaces a lower one still on its way, which is
 * abandoned. A version at or below one already taken over, given up or on its way is not run
 * again (nor recorded). Returns each consumer's versions after it.
 * @throws {InvalidOptionError} for a new version with side effects while the live version runs on
 *   rows rebuilt for it (it would have no rows to take over); nothing is registered
 */
export async function registerVersions(
  tx: TransactionSql,
  t: Tables,
  declared: readonly DeclaredVersion[],
  actor: string,
): Promise<Map<string, VersionRow[]>> {
  const names = [...new Set(declared.map((d) => d.name))];
  const result = new Map<string, VersionRow[]>();
  for (const name of names) {
    const mine = declared.filter((d) => d.name === name).sort((a, b) => a.version - b.version);
    let known = (
      await tx<VersionDbRow[]>`
        select ${VERSION_COLUMNS(tx)} from ${t.consumerVersions}
        where consumer_name = ${name} order by version for update`
    ).map(versionOf);
    if (known.length === 0) {
      const [existing] = await tx`
        select 1 from ${t.consumers} where name = ${name} and left(instance_id, 1) = '*' limit 1`;
      const lowest = mine[0] as DeclaredVersion;
      const live = existing
        ? (mine.find((d) => d.version === 1) ?? {
            // The rows from before versioning, as they ran: no side effects declared, no view.
            ...lowest,
            version: 1,
            rowName: name,
            sideEffects: false,
            takeoverWithin: null,
            view: null,
          })
        : lowest;
      await insertVersion(tx, t, live, 'live', 0n, actor);
      await tx`update ${t.consumers} set version = ${live.version} where name = ${live.rowName}`;
      known = [versionOf(await selectOne(tx, t, name, live.version))];
    }
    for (const d of mine) {
      if (known.some((k) => k.version === d.version)) continue;
      const live = known.find((k) => k.state === 'live');
      const next = known.find((k) => (NEXT_STATES as readonly string[]).includes(k.state));
      const newest = Math.max(...known.map((k) => k.version));
      // Below a version recorded (taken over, given up or on its way): not run again. A process of
      // an older release leaves the rows to the others during a rolling deployment; the dispatcher
      // logs that it does not run it.
      if (d.version < newest) continue;
      // No operation leaves a consumer without a live version (a hand-edited table could): refused,
      // not skipped, as nothing would run the consumer.
      if (!live) {
        const top = known.find((k) => k.version === newest) as VersionRow;
        throw new RebuildStateError(
          name,
          top.version,
          top.state,
          `the consumer has no live version, so version ${d.version} has nothing to take over from; nothing was registered`,
        );
      }
      // A version with side effects takes over the consumer's own rows (the name a process gives its
      // rows follows from its declaration alone: options.ts versionRowName). Once a rebuilt version,
      // on rows of its own, is live, there are none to take over: refused, not skipped, as a process
      // that declares it alone would serve the consumer nowhere (docs/design.md §12.2).
      if (d.sideEffects && live.rowName !== name) {
        throw new InvalidOptionError(
          `${d.option}.sideEffects`,
          `is true, but consumer "${name}"'s live version ${live.version} was rebuilt on rows of its own ` +
            `("${live.rowName}"), and a version with side effects can only take over the consumer's own rows ` +
            `("${name}"): version ${d.version} would never run. Nothing was registered. Declare version ` +
            `${d.version} without sideEffects (it is rebuilt on rows of its own from rebuild.from, its handler ` +
            `called again for every event from there), or send the effects from a consumer of another name ` +
            `(startFrom: 'now')`,
        );
      }
      // From the beginning means from before the oldest event retention kept (as a restart from
      // the beginning does): ids below it are gone, not holes to wait for.
      const floor = await retentionFloor(tx, t);
      const beginning = await beginningOf(tx, t, floor);
      const start = d.startPosition > beginning ? d.startPosition : beginning;
      // Rows that start above the head would count as caught up, and once they took over, the
      // consumer would never receive the events still to come up to there: refused, as a restart
      // there is.
      if (!d.sideEffects && start > beginning) {
        const last = await logHead(tx, t, floor);
        if (start > last) {
          throw new BeyondHeadError(
            start,
            last,
            `Cannot rebuild version ${d.version} of "${name}" from ${start}: the log head is ${last}, and its ` +
              `rows would start above it: once it took over, the consumer would never receive the events still ` +
              `to come up to ${start}. Nothing was registered; set rebuild.from to ${last} or lower (or 'beginning')`,
          );
        }
      }
      if (next) await abandon(tx, t, name, next, live, actor, `version ${d.version} was declared`);
      const state: VersionState = d.sideEffects ? 'waiting' : 'rebuilding';
      await insertVersion(tx, t, d, state, d.sideEffects ? 0n : start, actor);
      known = (
        await tx<VersionDbRow[]>`
        select ${VERSION_COLUMNS(tx)} from ${t.consumerVersions}
        where consumer_name = ${name} order by version`
      ).map(versionOf);
    }
    // How a version on its way takes over follows what the newest deployment declares.
    for (const d of mine) {
      const k = known.find((v) => v.version === d.version);
      if (!k || !['rebuilding', 'paused', 'waiting', 'live'].includes(k.state)) continue;
      await tx`
        update ${t.consumerVersions}
        set takeover_within = ${d.takeoverWithin === null ? null : d.takeoverWithin.toString()}::bigint,
            view_name = ${d.view?.view ?? null}, view_source = ${d.view?.source ?? null}
        where consumer_name = ${name} and version = ${d.version}`;
    }
    result.set(name, await selectVersions(tx, t, [name]));
  }
  return result;
}

async function insertVersion(
  tx: TransactionSql,
  t: Tables,
  d: DeclaredVersion,
  state: VersionState,
  start: bigint,
  actor: string,
): Promise<void> {
  await tx`
    insert into ${t.consumerVersions}
      (consumer_name, version, state, row_name, side_effects, start_position, takeover_within, view_name,
       view_source, changed_by)
    values (${d.name}, ${d.version}, ${state}, ${d.rowName}, ${d.sideEffects}, ${start.toString()}::bigint,
            ${d.takeoverWithin === null ? null : d.takeoverWithin.toString()}::bigint,
            ${d.view?.view ?? null}, ${d.view?.source ?? null}, ${actor})`;
  // A consumer's first version is live by declaration: nothing to audit. A rebuild started, or a
  // version waiting to take over, is.
  if (state === 'live') return;
  await writeAudit(tx, t, {
    actor,
    action: 'rebuild-started',
    consumerName: d.name,
    instanceId: null,
    cursorBefore: null,
    cursorAfter: state === 'rebuilding' ? start : null,
    details: { version: d.version, state, rowName: d.rowName },
  });
}

async function selectOne(
  tx: TransactionSql,
  t: Tables,
  name: string,
  version: number,
): Promise<VersionDbRow> {
  const [row] = await tx<VersionDbRow[]>`
    select ${VERSION_COLUMNS(tx)} from ${t.consumerVersions}
    where consumer_name = ${name} and version = ${version}`;
  if (!row) throw new Error(`version ${version} of consumer "${name}" vanished in its own transaction`);
  return row;
}

/** The consumer's versions, locked: its live one and the one on its way, if any. */
async function lockVersions(
  tx: TransactionSql,
  t: Tables,
  name: string,
): Promise<{ all: VersionRow[]; live: VersionRow | undefined; next: VersionRow | undefined }> {
  const all = (
    await tx<VersionDbRow[]>`
      select ${VERSION_COLUMNS(tx)} from ${t.consumerVersions}
      where consumer_name = ${name} order by version for update`
  ).map(versionOf);
  if (all.length === 0) {
    const [row] = await tx`select 1 from ${t.consumers} where name = ${name} limit 1`;
    if (!row) throw new ConsumerNotFoundError(name);
    throw new RebuildNotFoundError(name, 'it has no versions (it declares no version)');
  }
  return {
    all,
    live: all.find((v) => v.state === 'live'),
    next: all.find((v) => (NEXT_STATES as readonly string[]).includes(v.state)),
  };
}

interface LockedRow {
  instance_id: string;
  cursor: string;
  status: string;
  disabled_reason: string | null;
  gap_count: number;
}

/** The consumer's rows of `rowName` (every lane), locked; waits for a turn holding one. */
async function lockRows(tx: TransactionSql, t: Tables, rowName: string): Promise<LockedRow[]> {
  return tx<LockedRow[]>`
    select instance_id, cursor::text as cursor, status, disabled_reason, gap_count from ${t.consumers}
    where name = ${rowName} and left(instance_id, 1) = '*'
    order by instance_id for update`;
}

/** Waits at most `ms` for a lock in this transaction (a turn holding a row: SQLSTATE 55P03 past it). */
async function lockTimeout(tx: TransactionSql, ms: number): Promise<void> {
  await tx`select set_config('lock_timeout', ${String(ms)}, true)`;
}

async function head(tx: Queryable, t: Tables): Promise<bigint> {
  const [row] = await tx<{ head: string }[]>`select coalesce(max(id), 0)::text as head from ${t.events}`;
  return BigInt(row?.head ?? '0');
}

/** The reason a live version's rows carry while a new version takes over from them. */
const takeoverReason = (version: number) => `version ${version} takes over`;
/** The reason a paused rebuild's rows carry. */
const PAUSED_REASON = 'rebuild paused';

const maxCursor = (rows: readonly { cursor: string }[]): bigint =>
  rows.map((r) => BigInt(r.cursor)).reduce((a, b) => (a > b ? a : b), 0n);

const minCursor = (rows: readonly { cursor: string }[]): bigint | null =>
  rows.length === 0 ? null : rows.map((r) => BigInt(r.cursor)).reduce((a, b) => (a < b ? a : b));

/** What an operator action on a consumer's versions did. */
export interface VersionChange {
  readonly consumer: string;
  readonly version: number;
  /** The version's state after it. */
  readonly state: VersionState;
  readonly barrier: bigint | null;
}

/**
 * Starts the takeover of the version on its way (docs/design.md §12.3). With side effects: the
 * rows switch to it now, at the position the live version reached. A rebuild: the live version's
 * rows stop (disabled) at the barrier, the highest of their cursors; the rebuild becomes live once
 * every row of it has reached the barrier with no pending gap at or below it, in this transaction
 * if it already has (else in a later turn of the dispatcher: completeTakeover). Audited.
 * `within`: refuse (RebuildNotReadyError) while the rebuild is further behind the head than this;
 * null: no limit (an approval with force); 'declared': the version's own takeover distance, read
 * under the lock (APPROVE_WITHIN_DEFAULT when it declares none).
 */
export async function beginTakeover(
  sql: Sql,
  t: Tables,
  schema: string,
  name: string,
  options: {
    readonly actor: string;
    readonly version?: number;
    readonly within: bigint | null | 'declared';
    /** How long to wait for a turn holding a row (lock_timeout). */
    readonly lockTimeoutMs: number;
    /** Free text kept in the audit. */
    readonly reason?: string;
  },
): Promise<VersionChange> {
  return guardedBegin(sql, async (tx) => {
    await lockTimeout(tx, options.lockTimeoutMs);
    await tx`select pg_advisory_xact_lock(${LANES_LOCK_CLASS}, hashtext(${schema}))`;
    const { live, next } = await lockVersions(tx, t, name);
    if (!next || (options.version !== undefined && next.version !== options.version)) {
      throw new RebuildNotFoundError(
        name,
        options.version === undefined
          ? 'no version of it is on its way to take over'
          : `version ${options.version} is not on its way to take over`,
      );
    }
    if (!live)
      throw new RebuildStateError(name, next.version, next.state, 'the consumer has no live version');
    if (next.state === 'taking-over') {
      const done = await tryComplete(tx, t, name, live, next, options.actor);
      return {
        consumer: name,
        version: next.version,
        state: done ? 'live' : 'taking-over',
        barrier: next.barrier,
      };
    }
    if (next.state === 'paused') {
      throw new RebuildStateError(name, next.version, 'paused', 'resume it before it takes over');
    }
    const liveRows = await lockRows(tx, t, live.rowName);
    if (next.sideEffects) {
      // One set of rows: from the next turn on, only the new version's processes turn them.
      await tx`update ${t.consumers} set version = ${next.version} where name = ${live.rowName}`;
      await setState(tx, t, name, live.version, 'retired', options.actor);
      await setState(tx, t, name, next.version, 'live', options.actor);
      const position = minCursor(liveRows);
      await writeAudit(tx, t, {
        actor: options.actor,
        action: 'version-live',
        consumerName: name,
        instanceId: null,
        cursorBefore: position,
        cursorAfter: position,
        details: {
          version: next.version,
          from: live.version,
          sideEffects: true,
          ...(options.reason === undefined ? {} : { reason: options.reason }),
        },
      });
      return { consumer: name, version: next.version, state: 'live', barrier: position };
    }
    const nextRows = await tx<{ cursor: string; status: string; disabled_reason: string | null }[]>`
      select cursor::text as cursor, status, disabled_reason from ${t.consumers}
      where name = ${next.rowName} and left(instance_id, 1) = '*'`;
    // The live version stops only for a rebuild that goes on: not one with a dead or disabled row.
    const stuck = nextRows.find((r) => r.status === 'dead' || r.status === 'disabled');
    if (stuck) {
      throw new RebuildStateError(
        name,
        next.version,
        next.state,
        stuck.status === 'dead'
          ? 'a row of it is dead: restart it or skip its event before it takes over'
          : `a row of it is disabled (${stuck.disabled_reason ?? 'no reason given'}): enable it before it takes over`,
      );
    }
    const viewProblem = await liveViewProblem(tx, next);
    if (viewProblem !== null) throw new RebuildStateError(name, next.version, next.state, viewProblem);
    const behind = (await head(tx, t)) - (minCursor(nextRows) ?? next.startPosition);
    const within =
      options.within === 'declared' ? (next.takeoverWithin ?? APPROVE_WITHIN_DEFAULT) : options.within;
    if (within !== null && behind > within) {
      throw new RebuildNotReadyError(name, next.version, behind, within);
    }
    const barrier = maxCursor(liveRows);
    // A dead row, or one an operator disabled, keeps its status (and an abandon leaves it so).
    await tx`
      update ${t.consumers}
      set status = 'disabled', disabled_reason = ${takeoverReason(next.version)},
          disabled_until = null, updated_at = now()
      where name = ${live.rowName} and left(instance_id, 1) = '*' and status not in ('dead', 'disabled')`;
    await tx`
      update ${t.consumerVersions}
      set state = 'taking-over', barrier = ${barrier.toString()}::bigint, changed_by = ${options.actor},
          state_changed_at = now()
      where consumer_name = ${name} and version = ${next.version}`;
    await writeAudit(tx, t, {
      actor: options.actor,
      action: 'rebuild-takeover',
      consumerName: name,
      instanceId: null,
      cursorBefore: null,
      cursorAfter: barrier,
      details: {
        version: next.version,
        from: live.version,
        behind,
        force: within === null,
        ...(options.reason === undefined ? {} : { reason: options.reason }),
      },
    });
    const done = await tryComplete(tx, t, name, live, { ...next, barrier }, options.actor);
    return { consumer: name, version: next.version, state: done ? 'live' : 'taking-over', barrier };
  });
}

/**
 * Ends a takeover whose rebuild has caught up (docs/design.md §12.3): called by the dispatcher
 * after a pass; returns whether the version is live now. Nothing happens while a row of the
 * rebuild is short of the barrier, has a pending gap at or below it, or is held by a turn.
 */
export async function completeTakeover(
  sql: Sql,
  t: Tables,
  name: string,
  actor: string,
  lockTimeoutMs: number,
): Promise<boolean> {
  return guardedBegin(sql, async (tx) => {
    await lockTimeout(tx, lockTimeoutMs);
    const { live, next } = await lockVersions(tx, t, name);
    if (!live || next?.state !== 'taking-over') return false;
    return tryComplete(tx, t, name, live, next, actor);
  });
}

async function tryComplete(
  tx: TransactionSql,
  t: Tables,
  name: string,
  live: VersionRow,
  next: VersionRow,
  actor: string,
): Promise<boolean> {
  const barrier = next.barrier ?? 0n;
  // The rebuild's rows first, SKIP LOCKED: a row a turn holds is not ready yet (its turn may move
  // it); a later pass tries again.
  const held = await tx`
    select 1 from ${t.consumers}
    where name = ${next.rowName} and left(instance_id, 1) = '*'
    for update skip locked`;
  const [{ all } = { all: 0 }] = await tx<{ all: number }[]>`
    select count(*)::int as all from ${t.consumers}
    where name = ${next.rowName} and left(instance_id, 1) = '*'`;
  if (held.length === 0 || held.length !== all) return false;
  // The live version's rows too: one an operator enabled, or whose time-boxed disable ran out,
  // may have gone past the barrier since the takeover began. It stops again and the barrier
  // rises to it (the rebuild must hold at least what the live version held).
  const liveRows = await lockRows(tx, t, live.rowName);
  const top = maxCursor(liveRows);
  if (top > barrier || liveRows.some((r) => r.status !== 'dead' && r.status !== 'disabled')) {
    await tx`
      update ${t.consumers}
      set status = 'disabled', disabled_reason = ${takeoverReason(next.version)},
          disabled_until = null, updated_at = now()
      where name = ${live.rowName} and left(instance_id, 1) = '*' and status not in ('dead', 'disabled')`;
    if (top > barrier) {
      await tx`
        update ${t.consumerVersions} set barrier = ${top.toString()}::bigint
        where consumer_name = ${name} and version = ${next.version}`;
      return false;
    }
  }
  // Read once every row is held (a statement's snapshot taken before a turn committed would pair
  // the turn's new cursor with the gaps as they were before it).
  const rows = await tx<{ cursor: string; status: string; pending: boolean }[]>`
    select c.cursor::text as cursor, c.status,
           c.start_upto is not null
           or exists (select 1 from ${t.gaps} g
                      where g.consumer_name = c.name and g.instance_id = c.instance_id
                        and g.from_id <= ${barrier.toString()}::bigint) as pending
    from ${t.consumers} c
    where c.name = ${next.rowName} and left(c.instance_id, 1) = '*'`;
  // An event the rebuild set aside at or below the barrier is one it has not delivered yet: the
  // event that parked its key, or one set aside after it (a late one may lie below that one).
  const [parked] = await tx`
    select 1 from ${t.parkedEvents}
    where consumer_name = ${next.rowName} and event_id <= ${barrier.toString()}::bigint limit 1`;
  const ready =
    rows.length === all &&
    !parked &&
    rows.every(
      (r) => BigInt(r.cursor) >= barrier && !r.pending && r.status !== 'dead' && r.status !== 'disabled',
    );
  if (!ready) return false;
  if (next.viewName !== null && next.viewSource !== null) {
    const problem = await liveViewProblem(tx, next);
    if (problem !== null) throw new RebuildStateError(name, next.version, next.state, problem);
    if (!(await swapView(tx, next.viewName, next.viewSource))) return false;
  }
  await tx`
    update ${t.consumers}
    set status = 'disabled', disabled_reason = ${`retired: version ${next.version} is live`},
        disabled_until = null, updated_at = now()
    where name = ${live.rowName} and left(instance_id, 1) = '*'`;
  await setState(tx, t, name, live.version, 'retired', actor);
  await setState(tx, t, name, next.version, 'live', actor);
  await writeAudit(tx, t, {
    actor,
    action: 'version-live',
    consumerName: name,
    instanceId: null,
    cursorBefore: null,
    cursorAfter: barrier,
    details: { version: next.version, from: live.version, view: next.viewName },
  });
  return true;
}

/** `name` or `schema.name` as a quoted identifier (names as options.ts validates them). */
const quoteName = (name: string): string =>
  name
    .split('.')
    .map((part) => `"${part.replaceAll('"', '""')}"`)
    .join('.');

/**
 * An object that a DROP of the relation `c` (of pg_class) of the statement it is part of would fail
 * on, described by PostgreSQL (a view built on it, a SQL function with a BEGIN ATOMIC body that
 * reads it, another table's foreign key, a function or column of its row type); null when there is
 * none. The relation's own parts (a
 * view's rule, a table's constraints, indexes and triggers) go with it and do not count.
 */
const dependentOfC = (tx: TransactionSql) => tx`
  (select pg_describe_object(d.classid, d.objid, d.objsubid) from pg_depend d
   where ((d.refclassid = 'pg_class'::regclass and d.refobjid = c.oid)
          or (d.refclassid = 'pg_type'::regclass and d.refobjid = c.reltype))
     and d.deptype = 'n'
     and not exists (select 1 from pg_depend own
                     where own.classid = d.classid and own.objid = d.objid
                       and own.refclassid = 'pg_class'::regclass and own.refobjid = c.oid
                       and own.deptype in ('a', 'i'))
   order by 1 limit 1)`;

/** How long the view swap waits for readers of the view before it tries again on a later pass. */
const VIEW_LOCK_TIMEOUT_MS = 1_000;
const VIEW_PRIVILEGES = new Set([
  'SELECT',
  'INSERT',
  'UPDATE',
  'DELETE',
  'TRUNCATE',
  'REFERENCES',
  'TRIGGER',
  'MAINTAIN',
]);

/**
 * Why the version's liveView cannot be swapped by this role, or null when it can (or it has none):
 * its source must exist; the view, if it exists, must be a view, owned by a role this one is a
 * member of, that nothing else depends on (the DROP would fail on it), and with no trigger or rule
 * of its own (the DROP would take them along, and the new view would have none).
 */
async function liveViewProblem(tx: TransactionSql, v: VersionRow): Promise<string | null> {
  if (v.viewName === null || v.viewSource === null) return null;
  const [row] = await tx<
    {
      source: boolean;
      kind: string | null;
      owned: boolean | null;
      dependent: string | null;
      own: string | null;
    }[]
  >`
    select to_regclass(${v.viewSource}) is not null as source,
           c.relkind::text as kind,
           pg_has_role(c.relowner, 'MEMBER') as owned,
           ${dependentOfC(tx)} as dependent,
           coalesce(
             (select 'trigger ' || quote_ident(g.tgname) from pg_trigger g
              where g.tgrelid = c.oid and not g.tgisinternal order by g.tgname limit 1),
             (select 'rule ' || quote_ident(r.rulename) from pg_rewrite r
              where r.ev_class = c.oid and r.rulename <> '_RETURN' order by r.rulename limit 1)) as own
    from (select 1) one
    left join pg_class c on c.oid = to_regclass(${v.viewName})`;
  if (!row?.source) return `its liveView source ${v.viewSource} does not exist`;
  if (row.kind === null) return null;
  if (row.kind !== 'v') return `its liveView ${v.viewName} exists and is not a view`;
  if (!row.owned)
    return `its liveView ${v.viewName} is owned by a role the dispatcher's role is not a member of`;
  if (row.dependent !== null)
    return `${row.dependent} depends on its liveView ${v.viewName}, which the switch drops and creates again: drop it or read the source`;
  if (row.own !== null)
    return `its liveView ${v.viewName} has a ${row.own}, which the switch cannot carry to the new view: drop it or read the source`;
  return null;
}

/** The options of a view (its reloptions) that its swap carries over. */
const VIEW_OPTIONS: ReadonlySet<string> = new Set(['check_option', 'security_barrier', 'security_invoker']);

/**
 * Points the view at the new source (drop and create, in the takeover's transaction: readers see
 * one version's relation or the other's), keeping its owner, its grants (on the view and on each
 * of its columns the new view still has), its options (security_invoker, security_barrier,
 * check_option) and its comment: a reader has the same access before and after. Waits at most
 * VIEW_LOCK_TIMEOUT_MS for readers holding the view; false when that ran out (tried again later).
 */
async function swapView(tx: TransactionSql, view: string, source: string): Promise<boolean> {
  try {
    await tx.savepoint(async (sp) => {
      await sp`select set_config('lock_timeout', ${String(VIEW_LOCK_TIMEOUT_MS)}, true)`;
      // What is carried over is read once the view is held: a grant, comment or option committed
      // while the swap waited for its lock is not lost.
      const [found] = await sp<{ exists: boolean }[]>`select to_regclass(${view}) is not null as exists`;
      if (found?.exists) await sp`lock table ${sp(view)} in access exclusive mode`;
      const grants = await sp<
        { grantee: string; privilege: string; grantable: boolean; column: string | null }[]
      >`
        select case when a.grantee = 0 then 'public' else quote_ident(r.rolname) end as grantee,
               a.privilege_type as privilege, a.is_grantable as grantable, null::text as column
        from pg_class c cross join lateral aclexplode(c.relacl) a
        left join pg_roles r on r.oid = a.grantee
        where c.oid = to_regclass(${view}) and a.grantee <> c.relowner
        union all
        select case when a.grantee = 0 then 'public' else quote_ident(r.rolname) end,
               a.privilege_type, a.is_grantable, quote_ident(att.attname)
        from pg_class c join pg_attribute att on att.attrelid = c.oid and att.attnum > 0 and not att.attisdropped
        cross join lateral aclexplode(att.attacl) a
        left join pg_roles r on r.oid = a.grantee
        where c.oid = to_regclass(${view}) and a.grantee <> c.relowner`;
      const [kept] = await sp<{ owner: string | null; me: boolean; comment: string | null }[]>`
        select quote_ident(r.rolname) as owner, r.rolname = current_user as me,
               format('%L', obj_description(c.oid, 'pg_class')) as comment
        from pg_class c join pg_roles r on r.oid = c.relowner where c.oid = to_regclass(${view})`;
      // Each option as it was written (PostgreSQL keeps `security_invoker = yes` as 'yes'), quoted.
      const options = (
        await sp<{ key: string; value: string }[]>`
          select split_part(o, '=', 1) as key, format('%L', substr(o, strpos(o, '=') + 1)) as value
          from pg_class c cross join lateral unnest(c.reloptions) o
          where c.oid = to_regclass(${view})`
      ).filter((o) => VIEW_OPTIONS.has(o.key));
      await sp`drop view if exists ${sp(view)}`;
      await sp`create view ${sp(view)} as select * from ${sp(source)}`;
      // Role and column names come quoted by quote_ident, option names from the fixed list, their
      // values and the comment quoted by format('%L'), the view's name from quoteName (validated
      // names: letters, digits, _ and $).
      const name = quoteName(view);
      if (options.length > 0) {
        await sp.unsafe(`alter view ${name} set (${options.map((o) => `${o.key} = ${o.value}`).join(', ')})`);
      }
      if (kept && !kept.me && kept.owner !== null)
        await sp.unsafe(`alter view ${name} owner to ${kept.owner}`);
      if (kept?.comment && kept.comment !== 'NULL')
        await sp.unsafe(`comment on view ${name} is ${kept.comment}`);
      const [columns] = await sp<{ names: string }[]>`
        select coalesce(string_agg(quote_ident(attname), chr(1)), '') as names from pg_attribute
        where attrelid = to_regclass(${view}) and attnum > 0 and not attisdropped`;
      const now = new Set((columns?.names ?? '').split('\u0001'));
      for (const g of grants) {
        if (!VIEW_PRIVILEGES.has(g.privilege)) continue;
        // A column the new source no longer has takes its grant along.
        if (g.column !== null && !now.has(g.column)) continue;
        const on = g.column === null ? name : `(${g.column}) on ${name}`;
        await sp.unsafe(
          g.column === null
            ? `grant ${g.privilege} on ${on} to ${g.grantee}${g.grantable ? ' with grant option' : ''}`
            : `grant ${g.privilege} ${on} to ${g.grantee}${g.grantable ? ' with grant option' : ''}`,
        );
      }
    });
  } catch (error) {
    if ((error as { code?: string }).code === '55P03') return false;
    throw error;
  }
  return true;
}

async function setState(
  tx: TransactionSql,
  t: Tables,
  name: string,
  version: number,
  state: VersionState,
  actor: string,
): Promise<void> {
  await tx`
    update ${t.consumerVersions} set state = ${state}, changed_by = ${actor}, state_changed_at = now()
    where consumer_name = ${name} and version = ${version}`;
}

/** Removes the rows of a version on its way and marks it abandoned; a stopped live version goes on. */
async function abandon(
  tx: TransactionSql,
  t: Tables,
  name: string,
  next: VersionRow,
  live: VersionRow | undefined,
  actor: string,
  why: string,
): Promise<void> {
  if (next.state === 'taking-over' && live) {
    await tx`
      update ${t.consumers} set status = 'idle', disabled_reason = null, updated_at = now()
      where name = ${live.rowName} and left(instance_id, 1) = '*' and status = 'disabled'
        and disabled_reason = ${takeoverReason(next.version)}`;
  }
  if (!next.sideEffects && next.rowName !== live?.rowName) await deleteRows(tx, t, next.rowName);
  await tx`
    update ${t.consumerVersions}
    set state = 'abandoned', barrier = null, changed_by = ${actor}, state_changed_at = now()
    where consumer_name = ${name} and version = ${next.version}`;
  await writeAudit(tx, t, {
    actor,
    action: 'rebuild-abandoned',
    consumerName: name,
    instanceId: null,
    cursorBefore: null,
    cursorAfter: null,
    details: { version: next.version, state: next.state, why },
  });
}

/** Every row a version's consumer rows own: the rows, their gaps, crash records and dead letters. */
async function deleteRows(tx: TransactionSql, t: Tables, rowName: string): Promise<number> {
  // The rows first, as a turn takes them (then their gaps): waits for a turn holding one. In
  // instance id order, as lockRows, trySwitchLanes and the operator actions (admin's
  // withLockedConsumers) take a consumer's rows.
  await tx`select 1 from ${t.consumers} where name = ${rowName} order by instance_id for update`;
  await tx`delete from ${t.gaps} where consumer_name = ${rowName}`;
  await tx`delete from ${t.turnStarts} where consumer_name = ${rowName}`;
  await tx`delete from ${t.deadLetters} where consumer_name = ${rowName}`;
  await tx`delete from ${t.parkedKeys} where consumer_name = ${rowName}`;
  await tx`delete from ${t.laneChanges} where consumer_name = ${rowName}`;
  const deleted = await tx`delete from ${t.consumers} where name = ${rowName}`;
  return deleted.count;
}

/**
 * Pauses (its rows stop), resumes or abandons (its rows are removed; a live version stopped by its
 * takeover goes on) the version of `name` on its way. Audited.
 */
export async function changeRebuild(
  sql: Sql,
  t: Tables,
  name: string,
  action: 'pause' | 'resume' | 'abandon',
  options: {
    readonly actor: string;
    readonly version?: number;
    readonly reason?: string;
    readonly lockTimeoutMs: number;
  },
): Promise<VersionChange> {
  return guardedBegin(sql, async (tx) => {
    await lockTimeout(tx, options.lockTimeoutMs);
    const { live, next } = await lockVersions(tx, t, name);
    if (!next || (options.version !== undefined && next.version !== options.version)) {
      throw new RebuildNotFoundError(
        name,
        options.version === undefined
          ? 'no version of it is being rebuilt'
          : `version ${options.version} is not being rebuilt`,
      );
    }
    if (action === 'abandon') {
      await abandon(tx, t, name, next, live, options.actor, options.reason ?? 'an operator abandoned it');
      return { consumer: name, version: next.version, state: 'abandoned', barrier: null };
    }
    const [from, to]: [VersionState, VersionState] =
      action === 'pause' ? ['rebuilding', 'paused'] : ['paused', 'rebuilding'];
    if (next.state !== from) {
      throw new RebuildStateError(name, next.version, next.state, `only a ${from} version can be ${action}d`);
    }
    await lockRows(tx, t, next.rowName);
    // A dead row stays dead (and one an operator disabled stays disabled) across a pause and a resume.
    await (action === 'pause'
      ? tx`
          update ${t.consumers}
          set status = 'disabled', disabled_reason = ${PAUSED_REASON}, disabled_until = null,
              updated_at = now()
          where name = ${next.rowName} and left(instance_id, 1) = '*' and status not in ('dead', 'disabled')`
      : tx`
          update ${t.consumers} set status = 'idle', disabled_reason = null, updated_at = now()
          where name = ${next.rowName} and left(instance_id, 1) = '*' and status = 'disabled'
            and disabled_reason = ${PAUSED_REASON}`);
    await setState(tx, t, name, next.version, to, options.actor);
    await writeAudit(tx, t, {
      actor: options.actor,
      action: `rebuild-${action}d`,
      consumerName: name,
      instanceId: null,
      cursorBefore: null,
      cursorAfter: null,
      details: { version: next.version, ...(options.reason === undefined ? {} : { reason: options.reason }) },
    });
    return { consumer: name, version: next.version, state: to, barrier: null };
  });
}

/** What dropVersion removed: the rows of the version's consumer rows, and the relation dropped. */
export interface DroppedVersion {
  readonly consumer: string;
  readonly version: number;
  readonly rows: number;
  readonly dropped: string | null;
}

/**
 * Drops a retired version's data (docs/design.md §12.4): its consumer rows (and what they own) and,
 * with `dropSource`, the relation it declared as its liveView source. The one way Sluice removes
 * a version's data; audited.
 */
export async function dropVersion(
  sql: Sql,
  t: Tables,
  name: string,
  version: number,
  options: {
    readonly actor: string;
    readonly dropSource: boolean;
    readonly lockTimeoutMs: number;
    readonly reason?: string;
  },
): Promise<DroppedVersion> {
  return guardedBegin(sql, async (tx) => {
    await lockTimeout(tx, options.lockTimeoutMs);
    const { all, live } = await lockVersions(tx, t, name);
    const target = all.find((v) => v.version === version);
    if (!target) throw new RebuildNotFoundError(name, `it has no version ${version}`);
    if (target.state !== 'retired') {
      throw new RebuildStateError(name, version, target.state, 'only a retired version is dropped');
    }
    const rows = target.rowName === live?.rowName ? 0 : await deleteRows(tx, t, target.rowName);
    let dropped: string | null = null;
    if (options.dropSource && target.viewSource !== null) {
      const source = target.viewSource;
      const [rel] = await tx<{ kind: string; dependent: string | null; sharedBy: number | null }[]>`
        select c.relkind::text as kind,
               ${dependentOfC(tx)} as dependent,
               (select min(v.version) from ${t.consumerVersions} v
                where v.consumer_name = ${name} and v.version <> ${version}
                  and v.state not in ('retired', 'dropped', 'abandoned')
                  and to_regclass(v.view_source) = c.oid) as "sharedBy"
        from pg_class c where c.oid = to_regclass(${source})`;
      if (rel?.sharedBy != null) {
        throw new RebuildStateError(
          name,
          version,
          target.state,
          `version ${rel.sharedBy}, which is not retired, declares the same source ${source}: it is not dropped`,
        );
      }
      if (rel?.dependent != null) {
        throw new RebuildStateError(
          name,
          version,
          target.state,
          `${rel.dependent} depends on its source ${source} (the live view?): it is not dropped`,
        );
      }
      if (rel) {
        const kind = { r: 'table', p: 'table', v: 'view', m: 'materialized view' }[rel.kind];
        if (kind === undefined) {
          throw new RebuildStateError(
            name,
            version,
            target.state,
            `its source ${source} is neither a table nor a view: it is not dropped`,
          );
        }
        await tx.unsafe(`drop ${kind} ${quoteName(source)}`);
        dropped = source;
      }
    }
    await setState(tx, t, name, version, 'dropped', options.actor);
    await writeAudit(tx, t, {
      actor: options.actor,
      action: 'version-dropped',
      consumerName: name,
      instanceId: null,
      cursorBefore: null,
      cursorAfter: null,
      details: {
        version,
        rows,
        dropped,
        ...(options.reason === undefined ? {} : { reason: options.reason }),
      },
    });
    return { consumer: name, version, rows, dropped };
  });
}

/** A rebuild as the dashboard, the CLI and the metrics show it (docs/operating.md#rebuilds). */
export interface RebuildProgress {
  readonly consumer: string;
  readonly liveVersion: number | null;
  readonly version: number;
  readonly state: VersionState;
  readonly sideEffects: boolean;
  /** The lowest cursor among its rows (every lane); null for a version with side effects. */
  readonly position: bigint | null;
  readonly startPosition: bigint;
  readonly head: bigint;
  readonly lagEvents: bigint | null;
  /** Events per second since it started (its position over its age, paused time included). */
  readonly ratePerSecond: number | null;
  /** The time left at that rate; null while paused (nothing moves) or when nothing has moved yet. */
  readonly etaSeconds: number | null;
  /** From its start position to the head: 0 … 1. */
  readonly progress: number | null;
  readonly barrier: bigint | null;
  readonly takeoverWithin: bigint | null;
  readonly startedAt: Date;
  readonly stateChangedAt: Date;
}

/**
 * Every consumer's version on its way to take over (or only `name`'s), with how far it has come:
 * position, rate since it started and an estimate of the time left.
 */
export async function rebuildProgress(q: Queryable, t: Tables, name?: string): Promise<RebuildProgress[]> {
  const versions = await selectVersions(q, t, name === undefined ? undefined : [name]);
  const upTo = await head(q, t);
  const [now] = await q<{ now: Date }[]>`select statement_timestamp() as now`;
  const out: RebuildProgress[] = [];
  for (const v of versions) {
    if (!(NEXT_STATES as readonly string[]).includes(v.state)) continue;
    const live = versions.find((x) => x.consumerName === v.consumerName && x.state === 'live');
    const rows = v.sideEffects
      ? []
      : await q<{ cursor: string }[]>`
          select cursor::text as cursor from ${t.consumers}
          where name = ${v.rowName} and left(instance_id, 1) = '*'`;
    const position = v.sideEffects ? null : (minCursor(rows) ?? v.startPosition);
    const ageSeconds = Math.max(0.001, ((now?.now ?? new Date()).getTime() - v.createdAt.getTime()) / 1000);
    const done = position === null ? null : Number(position - v.startPosition);
    const rate = done === null ? null : done / ageSeconds;
    const lag = position === null ? null : upTo > position ? upTo - position : 0n;
    const span = Number(upTo - v.startPosition);
    out.push({
      consumer: v.consumerName,
      liveVersion: live?.version ?? null,
      version: v.version,
      state: v.state,
      sideEffects: v.sideEffects,
      position,
      startPosition: v.startPosition,
      head: upTo,
      lagEvents: lag,
      ratePerSecond: rate,
      etaSeconds:
        v.state === 'paused' || lag === null || rate === null || rate <= 0 ? null : Number(lag) / rate,
      progress: done === null ? null : span <= 0 ? 1 : Math.min(1, Math.max(0, done / span)),
      barrier: v.barrier,
      takeoverWithin: v.takeoverWithin,
      startedAt: v.createdAt,
      stateChangedAt: v.stateChangedAt,
    });
  }
  return out;
}

/**
 * The live version of consumer `name`, read in the caller's transaction (docs/design.md §12.3): a
 * reader that reads it and then the version's tables in one REPEATABLE READ transaction (or reads
 * through the liveView) never sees a version that is not live yet. Null when the consumer declares
 * no version.
 */
export async function liveVersionOf(q: Queryable, t: Tables, name: string): Promise<number | null> {
  const [row] = await q<{ version: number }[]>`
    select version from ${t.consumerVersions} where consumer_name = ${name} and state = 'live'`;
  return row?.version ?? null;
}

import { takeAdvisoryLocks } from './advisory-locks.js';
import type { Tables } from '../schema/tables.js';
import { InvalidOptionError } from '../errors.js';
import { type Queryable, type Sql, type TransactionSql, valuesOf } from '../sql-types.js';
import { SHARED_INSTANCE_ID } from '../options.js';
import { isSharedInstanceId, laneKeyOption } from '../lanes/lanes.js';
import { LANES_LOCK_CLASS } from './lanes.js';
import { registerVersions, type DeclaredVersion, type VersionRow } from './versions.js';
import { guardedBegin } from '../connections/guarded-transaction.js';
import { beginningOf, retentionFloor, writeAudit } from './audit.js';
import { pgArray } from './pg-array.js';
import { startTakenBack } from './turn-starts.js';
import { othersMayCommit, parseSnapshot, subtransactionXid } from '../gaps/gaps.js';

/** A consumer row as the idle pre-check and the turn read it (ids and xids as text: exact). */
export interface ConsumerStateRow {
  name: string;
  instance_id: string;
  status: 'idle' | 'processing' | 'dead' | 'disabled';
  cursor: string;
  attempts: number;
  stuck_event_id: string | null;
  skip_event_id: string | null;
  /** Dead letters of this consumer whose replay was requested and not done yet. */
  replays_pending: boolean;
  rearm_count: number;
  last_error: string | null;
  last_error_at: Date | null;
  /** 'handler', 'handler-timeout' (a transactional turn rolled back), or an infrastructure failure's category. */
  failure_category: string | null;
  updated_at: Date;
  disabled_until: Date | null;
  gap_count: number;
  gaps_unfenced: number;
  gap_min_fence: string | null;
  /** Comma-separated xids (read as text: no dependence on postgres.js array parsing). */
  gap_watch: string;
  gaps_recheck: boolean;
  oldest_gap_at: Date | null;
  start_fence: string | null;
  start_upto: string | null;
  /** 'now' consumers: stragglers at or below this id have been delivered (null: none yet). */
  start_after: string | null;
  start_snapshot: string | null;
  system_identifier: string | null;
  /** When the cursor last advanced, or the row was created if it never has (its stagnation counts from there). */
  last_progress_at: Date | null;
  /** The version of the consumer that may turn this row (docs/design.md §12); null: any. */
  version: number | null;
  /** The lane key the shared consumer's rows are kept by (laneKeyText); null: not recorded yet. */
  lane_key: string | null;
}

const STATE_COLUMNS = (q: Queryable, t: Tables) => q`
  c.name, c.instance_id, c.status, c.cursor::text as cursor, c.attempts, c.stuck_event_id::text as stuck_event_id,
  c.skip_event_id::text as skip_event_id,
  c.rearm_count, c.last_error, c.last_error_at, c.failure_category, c.updated_at, c.disabled_until, c.gap_count, c.gaps_unfenced,
  c.gap_min_fence::text as gap_min_fence, array_to_string(c.gap_watch, ',') as gap_watch, c.gaps_recheck, c.oldest_gap_at,
  c.start_fence::text as start_fence, c.start_upto::text as start_upto, c.start_after::text as start_after,
  c.start_snapshot::text as start_snapshot,
  c.system_identifier, coalesce(c.last_progress_at, c.created_at) as last_progress_at, c.version, c.lane_key,
  exists (select 1 from ${t.deadLetters} d
          where d.consumer_name = c.name and d.instance_id = c.instance_id
            and d.replay_requested_at is not null and d.replayed_at is null) as replays_pending`;

/**
 * Whether the consumer row `c` has parked keys (`replays`: ones whose replay an operator asked
 * for). Parked keys are a shared consumer's: a per-instance consumer of the same name (declared so
 * by another deployment) neither replays nor sets aside their events.
 */
const PARKED_KEYS = (q: Queryable, t: Tables, replays: boolean) => q`
  (left(c.instance_id, 1) = '*' and exists (
    select 1 from ${t.parkedKeys} p
    where p.consumer_name = c.name ${replays ? q`and p.replay_requested_at is not null` : q``}))`;

export interface RegisterRow {
  name: string;
  instanceId: string;
  startFrom: 'beginning' | 'now';
  perInstance: boolean;
  /** A version's rows (docs/design.md §12): the version, and the cursor a rebuild starts at. */
  version?: number | null;
  startAt?: bigint;
  /**
   * A shared consumer's key (laneKeyText): recorded with its rows. Another key recorded with rows
   * kept by it (several lanes, parked keys) refuses the start, at `option`.
   */
  laneKey?: { readonly text: string; readonly option: string };
  /**
   * A shared consumer declared without errorPolicy.parkKey: `option` names it. Parked keys of its
   * rows refuse the start (their later events would go before them).
   */
  notParking?: { readonly option: string };
  /**
   * A version with side effects still waiting to take the consumer's rows over: nothing is
   * registered or recorded for it, but its laneKey is checked against the one the rows were kept
   * by (once live, it would leave every lane to processes of the recorded key, and there are none).
   */
  keyCheckOnly?: boolean;
}

// Second key: hashtext(schema). prune() takes it exclusively; registration and operator restarts
// take it shared, so an event can never be pruned between "nobody needs it" and "someone does".
export const RETENTION_LOCK_CLASS = 0x534c5552; // 'SLUR'

/**
 * Creates the missing cursor rows; never touches an existing one. A 'now' consumer starts at the
 * highest visible id and remembers the snapshot, so events still in flight at that moment are
 * delivered once they commit (docs/design.md §4.10).
 */
export async function registerConsumers(
  sql: Sql,
  t: Tables,
  schema: string,
  rows: readonly RegisterRow[],
  versions?: {
    readonly declared: readonly DeclaredVersion[];
    readonly actor: string;
    /** Told the versions once recorded; returns the rows to register for them (a subset of `rows`). */
    readonly filter: (versions: Map<string, VersionRow[]>) => readonly RegisterRow[];
  },
): Promise<Registered> {
  return guardedBegin(sql, async (tx) => {
    // One registration (or change of lanes, or takeover) at a time: never two lane sets of one
    // consumer, never a version registered while another takes over. A start during a prune waits
    // for it.
    await takeAdvisoryLocks(tx, async () => {
      await tx`select pg_advisory_xact_lock_shared(${RETENTION_LOCK_CLASS}, hashtext(${schema}))`;
      await tx`select pg_advisory_xact_lock(${LANES_LOCK_CLASS}, hashtext(${schema}))`;
    });
    let checked: readonly RegisterRow[] = [];
    let rebuildSnapshot: string | null = null;
    if (versions && versions.declared.length > 0) {
      // Taken before the versions' registration reads where a rebuild starts (the beginning of what
      // retention kept): an event at or below that start that this snapshot does not show was in
      // flight then, and is delivered to the rebuild's rows when it commits (insertRegistrations).
      [[rebuildSnapshot = null] = []] = await valuesOf<[snapshot: string]>(
        tx`select pg_current_snapshot()::text`,
      );
      const filtered = versions.filter(await registerVersions(tx, t, versions.declared, versions.actor));
      rows = filtered.filter((r) => r.keyCheckOnly !== true);
      checked = filtered.filter((r) => r.keyCheckOnly === true);
    }
    const created = await insertRegistrations(tx, t, rows, rebuildSnapshot);
    // A version waiting to take the rows over records nothing, but is refused their key's way.
    await refuseKeptByAnother(tx, t, declaredKeys(checked));
    await recordLaneKeys(tx, t, rows);
    await refuseParkedKeysUnparked(tx, t, rows);
    await supersedeCollections(tx, t, created);
    const prunedBehind = await prunedBehindOf(tx, t, rows, created);
    const shared = [...new Set(rows.filter((r) => !r.perInstance).map((r) => r.name))];
    const found = await tx<{ name: string; instance_id: string }[]>`
      select name, instance_id from ${t.consumers}
      where left(instance_id, 1) = '*' and name = any(${pgArray(shared)}::text[])`;
    const families = new Map<string, string[]>();
    for (const row of found) {
      const ids = families.get(row.name);
      if (ids) ids.push(row.instance_id);
      else families.set(row.name, [row.instance_id]);
    }
    return { families, prunedBehind };
  });
}

/**
 * Records each shared consumer's key with its rows, and refuses (InvalidOptionError, rolling the
 * registration back) a key other than the one recorded where that matters: lane cursors, and
 * parked keys, mean something only under the key they were kept by (an event whose key moved to a
 * lane already past it would be skipped). Rows without one (from an earlier release) take it.
 */
async function recordLaneKeys(tx: TransactionSql, t: Tables, rows: readonly RegisterRow[]): Promise<void> {
  const declared = declaredKeys(rows);
  if (declared.size === 0) return;
  const names = [...declared.keys()];
  const moving = await refuseKeptByAnother(tx, t, declared);
  await tx`
    update ${t.consumers} c set lane_key = r.lane_key
    from unnest(${pgArray(names)}::text[], ${pgArray(names.map((n) => declared.get(n)?.text ?? null))}::text[])
         as r(name, lane_key)
    where c.name = r.name and left(c.instance_id, 1) = '*' and c.lane_key is distinct from r.lane_key`;
  if (moving.size === 0) return;
  // The update waited for a turn that held one of these rows, and that turn may have parked a key
  // under the old one after the read above. Now that the rows are held, a new read sees it; a turn
  // after this one finds the new key recorded and parks nothing.
  for (const { name, keyed } of await keptKeys(tx, t, [...moving.keys()])) {
    const key = declared.get(name);
    const other = moving.get(name);
    if (key && other !== undefined && keyed) throw keptByAnotherKey(key, name, other);
  }
}

/** The key each shared consumer of `rows` declares, by name. */
function declaredKeys(rows: readonly RegisterRow[]): Map<string, NonNullable<RegisterRow['laneKey']>> {
  const declared = new Map<string, NonNullable<RegisterRow['laneKey']>>();
  for (const row of rows) if (row.laneKey && !row.perInstance) declared.set(row.name, row.laneKey);
  return declared;
}

/**
 * Refuses (InvalidOptionError) a declared key other than the one recorded with rows kept by it.
 * Returns the consumers whose rows hold another key than the declared one but keep nothing by it,
 * with that key.
 */
async function refuseKeptByAnother(
  tx: TransactionSql,
  t: Tables,
  declared: ReadonlyMap<string, NonNullable<RegisterRow['laneKey']>>,
): Promise<Map<string, string>> {
  const moving = new Map<string, string>();
  if (declared.size === 0) return moving;
  for (const { name, keys, keyed } of await keptKeys(tx, t, [...declared.keys()])) {
    const key = declared.get(name);
    const other = keys.find((k) => k !== key?.text);
    if (!key || other === undefined) continue;
    if (keyed) throw keptByAnotherKey(key, name, other);
    moving.set(name, other);
  }
  return moving;
}

/**
 * Each shared consumer's recorded keys, and whether its rows keep anything by their key: what the
 * rows hold decides, not what a process declares. Cursors of several lanes (or of a change of lanes
 * under way) and parked keys were kept by the recorded key; one lane's cursor and no parked key
 * mean the same under any key.
 */
function keptKeys(tx: TransactionSql, t: Tables, names: readonly string[]) {
  return tx<{ name: string; keys: string[]; keyed: boolean }[]>`
    -- JSON, not text[]: nothing depends on how the pool parses arrays (postgres.js 3, fetch_types: false).
    select c.name, coalesce(json_agg(distinct c.lane_key) filter (where c.lane_key is not null), '[]') as keys,
           count(*) > 1
           or exists (select 1 from ${t.laneChanges} lc where lc.consumer_name = c.name)
           or exists (select 1 from ${t.parkedKeys} p where p.consumer_name = c.name) as keyed
    from ${t.consumers} c
    where left(c.instance_id, 1) = '*' and c.name = any(${pgArray(names)}::text[])
    group by c.name`;
}

function keptByAnotherKey(
  key: NonNullable<RegisterRow['laneKey']>,
  name: string,
  other: string,
): InvalidOptionError {
  return new InvalidOptionError(
    key.option,
    `is ${laneKeyOption(key.text)}, but consumer "${name}"'s lanes (or parked keys) were kept by ` +
      `${laneKeyOption(other)}: a lane's cursor means something only under its key, and events whose key ` +
      'moves to a lane already past them would not be delivered. Keep the recorded key, or give the ' +
      'consumer a new name, or a new version without side effects (rebuilt from the log on rows of its ' +
      'own); a version with side effects takes the same rows over and keeps their key',
  );
}

/**
 * Refuses (InvalidOptionError, rolling the registration back) a consumer declared without
 * errorPolicy.parkKey while keys of it are parked: a turn that does not park would deliver their
 * later events before the parked ones, out of order per key (docs/design.md §11.4). The operator
 * replays or drops them first.
 */
async function refuseParkedKeysUnparked(
  tx: TransactionSql,
  t: Tables,
  rows: readonly RegisterRow[],
): Promise<void> {
  const declared = new Map<string, string>();
  for (const row of rows)
    if (row.notParking && !row.perInstance) declared.set(row.name, row.notParking.option);
  if (declared.size === 0) return;
  const parked = await tx<{ name: string; keys: number }[]>`
    select consumer_name as name, count(*)::int as keys from ${t.parkedKeys}
    where consumer_name = any(${pgArray([...declared.keys()])}::text[])
    group by consumer_name order by consumer_name`;
  const [first] = parked;
  if (first === undefined) return;
  throw new InvalidOptionError(
    declared.get(first.name) ?? 'errorPolicy.parkKey',
    `is off, but consumer "${first.name}" has ${first.keys} parked key(s): without parking, the later ` +
      'events of those keys would be delivered before the parked ones. Replay or drop the parked keys ' +
      'first (sluice replay-key / drop-key, or the ops routes), or keep parkKey on until none is left',
  );
}

/** What registerConsumers found. */
export interface Registered {
  /** Each shared consumer's row instance ids (its lanes), by name. */
  readonly families: Map<string, string[]>;
  /**
   * This process's per-instance rows that were there before and still needed ids retention has
   * pruned: prune() passed them over as stale (not seen for staleInstanceTtlMs) while their process
   * was away, and the events between their cursor and `prunedThrough`, in their pending ranges up
   * to it, or among their 'now' stragglers up to it, are gone.
   */
  readonly prunedBehind: readonly {
    name: string;
    instanceId: string;
    cursor: bigint;
    prunedThrough: bigint;
    /** The lowest id of its pending ranges (ids it passed while a writer was in flight) that was pruned. */
    pendingFrom: bigint | null;
    /** Whether its 'now' start still waited for events in flight at its registration, some of them pruned. */
    stragglers: boolean;
  }[];
}

/**
 * See {@link Registered.prunedBehind}: rows created now are not (they start at what is kept), nor
 * rows created, restarted or re-registered since the last prune (they were placed after it,
 * knowing it: what they wait for below the floor was not pruned under them).
 */
async function prunedBehindOf(
  tx: TransactionSql,
  t: Tables,
  rows: readonly RegisterRow[],
  created: readonly { name: string; instance_id: string }[],
): Promise<Registered['prunedBehind']> {
  const existing = rows.filter(
    (r) => r.perInstance && !created.some((c) => c.name === r.name && c.instance_id === r.instanceId),
  );
  if (existing.length === 0) return [];
  const floor = await retentionFloor(tx, t);
  if (floor <= 1n) return [];
  const last = (floor - 1n).toString();
  // Below the floor, a row that prune did not pass over holds nothing: a cursor below it, a pending
  // range below it or a 'now' start still waiting for its stragglers each block a prune.
  const behind = await valuesOf<
    [name: string, instanceId: string, cursor: string, pendingFrom: string | null, stragglers: boolean]
  >(tx`
    select c.name, c.instance_id, c.cursor::text,
           (select min(g.from_id)::text from ${t.gaps} g
            where g.consumer_name = c.name and g.instance_id = c.instance_id and g.from_id <= ${last}::bigint),
           c.start_upto is not null
    from ${t.consumers} c
    join unnest(${pgArray(existing.map((r) => r.name))}::text[], ${pgArray(existing.map((r) => r.instanceId))}::text[])
      as r(name, instance_id) on c.name = r.name and c.instance_id = r.instance_id
    where (c.cursor < ${last}::bigint
           or c.start_upto is not null
           or exists (select 1 from ${t.gaps} g where g.consumer_name = c.name and g.instance_id = c.instance_id
                      and g.from_id <= ${last}::bigint))
      and c.created_at < (select max(p.at) from ${t.audit} p where p.action = 'prune')
      and not exists (select 1 from ${t.audit} a
                      where a.consumer_name = c.name and a.instance_id = c.instance_id
                        and a.action in ('restart', 're-register')
                        and a.id > (select max(p.id) from ${t.audit} p where p.action = 'prune'))
    order by c.name`);
  return behind.map(([name, instanceId, cursor, pendingFrom, stragglers]) => ({
    name,
    instanceId,
    cursor: BigInt(cursor),
    prunedThrough: floor - 1n,
    pendingFrom: pendingFrom === null ? null : BigInt(pendingFrom),
    stragglers,
  }));
}

/**
 * The insert of registerConsumers, under the caller's retention lock; returns the rows it created.
 * A 'now' row starts at the head its statement sees, and records that statement's snapshot and a
 * fence: an xid drawn after the snapshot (docs/design.md §4.10). The transaction's own xid is not
 * one when an earlier statement drew it (the versions' registration locks and writes first), before
 * that snapshot: a writer that began in between has a higher xid and would be taken for settled.
 * So the insert runs in a savepoint, whose xid is drawn by the insert itself, after its snapshot,
 * and read back as the new rows' xmin.
 */
async function insertRegistrations(
  tx: TransactionSql,
  t: Tables,
  rows: readonly RegisterRow[],
  rebuildSnapshot: string | null,
): Promise<{ name: string; instance_id: string; cursor: string }[]> {
  const created = await tx.savepoint(
    (sp) => sp<
      { name: string; instance_id: string; cursor: string; sub: string; top: string; snap: string | null }[]
    >`
      insert into ${t.consumers} as c
        (name, instance_id, cursor, last_seen_at, start_snapshot, start_upto, version)
      select r.name, r.instance_id,
             -- A row given its start (a rebuild's rows) starts there, whatever startFrom says.
             case when r.start_at is null and r.start_from = 'now' then h.head else coalesce(r.start_at, 0) end,
             case when r.per_instance = 'true' then now() end,
             -- A rebuild's rows wait as a 'now' row does for the events in flight at or below
             -- their start: one may commit there later (below the retention floor, or below
             -- rebuild.from), and the version it rebuilds would otherwise never see it.
             case when r.start_at is null and r.start_from = 'now' then h.snap
                  when r.start_at > 0 then coalesce(${rebuildSnapshot}::pg_snapshot, h.snap) end,
             case when r.start_at is null and r.start_from = 'now' then h.head
                  when r.start_at > 0 then r.start_at end,
             r.version
      from unnest(${pgArray(rows.map((r) => r.name))}::text[], ${pgArray(rows.map((r) => r.instanceId))}::text[],
                  ${pgArray(rows.map((r) => r.startFrom))}::text[], ${pgArray(rows.map((r) => String(r.perInstance)))}::text[],
                  ${pgArray(rows.map((r) => (r.startAt === undefined ? null : r.startAt.toString())))}::int8[],
                  ${pgArray(rows.map((r) => (r.version === undefined || r.version === null ? null : String(r.version))))}::int4[])
           as r(name, instance_id, start_from, per_instance, start_at, version)
      cross join (
        select coalesce((select max(id) from ${t.events}), 0) as head, pg_current_snapshot() as snap
      ) h
      -- A shared consumer's rows are created only when it has none: rows of another lane count
      -- are changed by a change of lanes (docs/design.md section 11.3), never added to. But for
      -- a lane missing among lanes of its own count while no change of lanes is under way (a
      -- change makes all its new lanes at once): its row was deleted.
      where r.per_instance = 'true'
         or not exists (select 1 from ${t.consumers} f
                        where f.name = r.name and left(f.instance_id, 1) = '*' and f.instance_id <> r.instance_id)
         or (r.instance_id like '*%/%'
             and not exists (select 1 from ${t.laneChanges} lc where lc.consumer_name = r.name)
             and not exists (select 1 from ${t.consumers} f
                             where f.name = r.name and left(f.instance_id, 1) = '*'
                               and split_part(f.instance_id, '/', 2) <> split_part(r.instance_id, '/', 2)))
      on conflict (name, instance_id) do nothing
      returning c.name, c.instance_id, c.cursor::text as cursor, c.xmin::text as sub,
                pg_current_xact_id()::text as top, c.start_snapshot::text as snap`,
  );
  const starting = created.flatMap((r) => (r.snap === null ? [] : [{ ...r, snap: r.snap }]));
  const first = starting[0];
  if (first) {
    // Something may still commit an id at or below the start: an xid the row's snapshot lists, or
    // one between its xmax and the fence. Else its start columns are not needed. (Every row drew
    // the same fence; a rebuild's rows have an earlier snapshot than a 'now' row's.)
    const top = BigInt(first.top);
    const fence = subtransactionXid(BigInt(first.sub), top);
    const inFlight = starting.map((r) => String(othersMayCommit(parseSnapshot(r.snap), top, fence)));
    await tx`
      update ${t.consumers} c set
        start_fence = case when r.waits then ${fence.toString()}::xid8 end,
        start_snapshot = case when r.waits then c.start_snapshot end,
        start_upto = case when r.waits then c.start_upto end
      from unnest(${pgArray(starting.map((r) => r.name))}::text[], ${pgArray(starting.map((r) => r.instance_id))}::text[],
                  ${pgArray(inFlight)}::bool[])
           as r(name, instance_id, waits)
      where c.name = r.name and c.instance_id = r.instance_id`;
  }
  return created.map(({ name, instance_id, cursor }) => ({ name, instance_id, cursor }));
}

/**
 * Rows a start registered that an operator had collected before: audited as registered per
 * startFrom, so that should such a row go missing again, it is not restored from that older
 * collection (reregisterConsumer reads the latest of the two) but registered as at start.
 */
async function supersedeCollections(
  tx: TransactionSql,
  t: Tables,
  created: readonly { name: string; instance_id: string; cursor: string }[],
): Promise<void> {
  const perInstance = created.filter((r) => !isSharedInstanceId(r.instance_id));
  if (perInstance.length === 0) return;
  for (const row of await lastCollectionWords(tx, t, perInstance)) {
    if (row.action !== 'collect-stale-instance') continue;
    const cursor = perInstance.find((r) => r.name === row.name && r.instance_id === row.instance_id)?.cursor;
    await writeAudit(tx, t, {
      actor: 'sluice-dispatcher',
      action: 're-register',
      consumerName: row.name,
      instanceId: row.instance_id,
      cursorBefore: null,
      cursorAfter: cursor === undefined ? null : BigInt(cursor),
      details: { from: 'start' },
    });
  }
}

/** What {@link reregisterConsumer} did for a consumer row that was missing. */
export interface Reregistration {
  /** Restored from an operator's collection of the row (its cursor and pending work), or new. */
  readonly from: 'collected' | 'start-from';
  readonly cursor: bigint;
  /** When, and by whom, the row was collected (from the audit). */
  readonly collectedAt: Date | null;
  readonly collectedBy: string | null;
  /**
   * Events this consumer had not received that retention deleted while its row was gone: ids up
   * to `prunedThrough` above the restored cursor. Null when nothing it needed was pruned.
   */
  readonly prunedThrough: bigint | null;
}

interface CollectAuditRow {
  name: string;
  instance_id: string;
  action: string;
  at: Date;
  actor: string;
  cursor_before: string | null;
  details: {
    lowestPendingId?: string | null;
    start?: { snapshot: string; fence: string; upto: string; after: string | null } | null;
  };
}

/**
 * The audit's last word on the collection of each of `rows`: its latest collection, or a
 * registration since (which supersedes it); none when neither was ever audited.
 */
function lastCollectionWords(
  tx: TransactionSql,
  t: Tables,
  rows: readonly { name: string; instance_id: string }[],
): Promise<CollectAuditRow[]> {
  return tx<CollectAuditRow[]>`
    select distinct on (a.consumer_name, a.instance_id)
           a.consumer_name as name, a.instance_id, a.action, a.at, a.actor,
           a.cursor_before::text as cursor_before, a.details
    from ${t.audit} a
    join unnest(${pgArray(rows.map((r) => r.name))}::text[],
                ${pgArray(rows.map((r) => r.instance_id))}::text[]) as r(name, instance_id)
      on a.consumer_name = r.name and a.instance_id = r.instance_id
    where a.action in ('collect-stale-instance', 're-register')
    order by a.consumer_name, a.instance_id, a.id desc`;
}

/**
 * Re-creates the row of a consumer of this process that is missing, and audits it; undefined when
 * another process re-created it first. A per-instance row an operator collected as stale while
 * this process lived on (its heartbeats could not reach the database) resumes where it was: at its
 * collected cursor, lowered below its lowest pending gap (those ids are delivered again rather than
 * lost), with its 'now' stragglers. Events retention deleted meanwhile are reported, not skipped
 * silently. A row gone without a collection is registered as at start().
 */
export async function reregisterConsumer(
  sql: Sql,
  t: Tables,
  schema: string,
  consumer: RegisterRow,
  /** The other lanes of a laned consumer that has no row at all: created with it. */
  alongside: readonly RegisterRow[] = [],
): Promise<Reregistration | undefined> {
  return guardedBegin(sql, async (tx) => {
    // Shared retention lock: no prune deletes what the restored cursor needs meanwhile. The lanes
    // lock, as a registration takes it: no change of lanes begins while a lane is re-created.
    await takeAdvisoryLocks(tx, async () => {
      await tx`select pg_advisory_xact_lock_shared(${RETENTION_LOCK_CLASS}, hashtext(${schema}))`;
      await tx`select pg_advisory_xact_lock(${LANES_LOCK_CLASS}, hashtext(${schema}))`;
    });
    const [last] = await lastCollectionWords(tx, t, [
      { name: consumer.name, instance_id: consumer.instanceId },
    ]);
    if (!last || last.action !== 'collect-stale-instance' || last.cursor_before === null) {
      const created = await insertRegistrations(tx, t, [consumer, ...alongside], null);
      for (const made of created) {
        await writeAudit(tx, t, {
          actor: 'sluice-dispatcher',
          action: 're-register',
          consumerName: made.name,
          instanceId: made.instance_id,
          cursorBefore: null,
          cursorAfter: BigInt(made.cursor),
          details: { from: 'start-from', startFrom: consumer.startFrom },
        });
      }
      const row = created.find((r) => r.instance_id === consumer.instanceId);
      if (!row) return undefined;
      const cursor = BigInt(row.cursor);
      return { from: 'start-from', cursor, collectedAt: null, collectedBy: null, prunedThrough: null };
    }
    const lowestPending = last.details.lowestPendingId ? BigInt(last.details.lowestPendingId) : null;
    let cursor = BigInt(last.cursor_before);
    if (lowestPending !== null && lowestPending - 1n < cursor) cursor = lowestPending - 1n;
    // Its 'now' stragglers not delivered yet (if any) come back with their registration snapshot.
    const start = last.details.start ?? null;
    const floor = await retentionFloor(tx, t);
    // Below the floor, it goes on from the beginning of what is kept (beginningOf).
    let prunedThrough: bigint | null = null;
    if (cursor < floor - 1n) {
      prunedThrough = floor - 1n;
      const beginning = await beginningOf(tx, t, floor);
      if (cursor < beginning) cursor = beginning;
    }
    const inserted = await tx`
      insert into ${t.consumers} (name, instance_id, cursor, last_seen_at, start_snapshot, start_fence, start_upto, start_after)
      values (${consumer.name}, ${consumer.instanceId}, ${cursor.toString()}::bigint,
              case when ${consumer.perInstance} then now() end,
              ${start?.snapshot ?? null}::pg_snapshot, ${start?.fence ?? null}::xid8,
              ${start?.upto ?? null}::bigint, ${start?.after ?? null}::bigint)
      on conflict (name, instance_id) do nothing`;
    if (inserted.count === 0) return undefined;
    await writeAudit(tx, t, {
      actor: 'sluice-dispatcher',
      action: 're-register',
      consumerName: consumer.name,
      instanceId: consumer.instanceId,
      cursorBefore: BigInt(last.cursor_before),
      cursorAfter: cursor,
      details: {
        from: 'collected',
        collectedAt: last.at.toISOString(),
        collectedBy: last.actor,
        prunedThrough: prunedThrough?.toString() ?? null,
      },
    });
    return { from: 'collected', cursor, collectedAt: last.at, collectedBy: last.actor, prunedThrough };
  });
}

export interface PrecheckRow extends ConsumerStateRow {
  head: string;
  snapshot: string;
  now: Date;
  lag_seconds: number | null;
  /** An old lane of a change of lane count in progress (docs/design.md §11.3): it takes a turn. */
  lane_changing: boolean;
  /** A pending range starts right after the cursor: a strict consumer waits there. */
  waits_at_hole: boolean;
  /** Some parked key of the consumer is to be replayed (docs/design.md §11.4). */
  parked_replays: boolean;
}

/**
 * The key a dispatcher knows a consumer row by: the consumer's name for its own row (shared '*',
 * or this process's per-instance row), name and instance id for one of its lanes. (Names hold no
 * NUL, so the two never collide.)
 */
export function unitKey(name: string, instanceId: string): string {
  return instanceId === SHARED_INSTANCE_ID || !isSharedInstanceId(instanceId)
    ? name
    : `${name}\u0000${instanceId}`;
}

export interface Precheck {
  /**
   * Consumers that are trivially caught up: neither dead nor disabled, no failed attempt, cursor at
   * the head, no pending gap, no start fence, no skip and no replay asked for. Their lag and gap
   * gauges are all zero, and only their names cross the wire.
   */
  readonly quiet: ReadonlySet<string>;
  /** Every other consumer row of this process, whole, for the pass to judge (isProvablyIdle). */
  readonly rows: ReadonlyMap<string, PrecheckRow>;
  /**
   * The instance ids of each shared consumer's rows ('*', or its lanes '*k/N'). Quiet and rows
   * above are keyed by {@link unitKey}.
   */
  readonly lanes: ReadonlyMap<string, readonly string[]>;
  /** The statement's snapshot, as text (see currentSnapshot). */
  readonly snapshot: string;
  /** The highest id visible to the statement (0 when the log is empty): a quiet consumer's cursor. */
  readonly head: string;
  /**
   * Dispatcher instances connected to this database (their own connections are named
   * `sluice:<instanceId>`), counted when the process has a consumer run as lanes: how many share
   * its lanes (docs/design.md §11.1). Null when not counted.
   */
  readonly dispatchers: number | null;
}

type JsonStateRow = Omit<PrecheckRow, DateColumn | 'head' | 'snapshot' | 'now'> &
  Record<DateColumn, string | null>;
/** A quiet row: its consumer's name, or [name, instance id] for a lane. */
type QuietEntry = string | [string, string];
type DateColumn = 'last_error_at' | 'updated_at' | 'disabled_until' | 'oldest_gap_at' | 'last_progress_at';

/** Which consumer rows a process's pre-check reads; made once per dispatcher (its consumers are fixed). */
export interface PrecheckKeys {
  /** Names of its shared consumers (instance '*', or their lanes), as an array literal. */
  readonly shared: string;
  readonly sharedNames: ReadonlySet<string>;
  /** Some shared consumer is configured with lanes: the pre-check counts the dispatchers. */
  readonly laned: boolean;
  /** Names of its per-instance consumers, as an array literal. */
  readonly own: string;
  /** The instance those are kept under ('' when it has none). */
  readonly ownInstance: string;
}

export function precheckKeys(
  consumers: readonly { name: string; instanceId: string; lanes?: number }[],
): PrecheckKeys {
  const shared = consumers.filter((c) => c.instanceId === SHARED_INSTANCE_ID);
  const own = consumers.filter((c) => c.instanceId !== SHARED_INSTANCE_ID);
  const ownInstances = new Set(own.map((c) => c.instanceId));
  if (ownInstances.size > 1) throw new Error('a dispatcher has one instanceId');
  const [ownInstance = ''] = ownInstances;
  return {
    shared: pgArray(shared.map((c) => c.name)),
    sharedNames: new Set(shared.map((c) => c.name)),
    laned: shared.some((c) => (c.lanes ?? 1) > 1),
    own: pgArray(own.map((c) => c.name)),
    ownInstance,
  };
}

/**
 * The idle pre-check (docs/design.md §4.1): one lock-free statement reading every consumer row of this
 * process with the log head and a snapshot, from which the pass decides who has provably nothing to do.
 * It comes back as one row: the names of the trivially caught-up consumers, decided in the
 * statement, and the other rows as JSON. An idle process with many consumers then costs the server
 * one scan and Node one row per tick; parsing a typed row per consumer was most of its CPU.
 */
export async function precheckConsumers(sql: Sql, t: Tables, keys: PrecheckKeys): Promise<Precheck> {
  const [result] = await sql<
    {
      head: string;
      snapshot: string;
      now: Date;
      quiet: QuietEntry[];
      rows: JsonStateRow[];
      dispatchers: number | null;
    }[]
  >`
    select h.head::text as head, pg_current_snapshot()::text as snapshot, now() as now, a.quiet, a.rows,
           case when ${keys.laned} then
             (select count(distinct d.application_name)::int from pg_stat_activity d
              where d.datname = current_database() and d.application_name like 'sluice:%')
           end as dispatchers
    from (select coalesce(max(id), 0) as head from ${t.events}) h
    cross join lateral (
      -- JSON, not text[]: nothing depends on how the pool parses arrays (fetch_types: false).
      select coalesce(json_agg(case when c.instance_id = ${SHARED_INSTANCE_ID} or left(c.instance_id, 1) <> '*'
                                    then to_json(c.name) else json_build_array(c.name, c.instance_id) end)
                      filter (where q.quiet), '[]') as quiet,
             coalesce(json_agg(s) filter (where not q.quiet), '[]') as rows
      from ${t.consumers} c
      cross join lateral (
        -- An old lane of a change of lane count (docs/design.md section 11.3) is never quiet: it drains to
        -- the barrier, hands over and goes.
        select exists (select 1 from ${t.laneChanges} lc
                       where lc.consumer_name = c.name
                         and case when c.instance_id = '*' then lc.from_lanes = 1
                                  when c.instance_id like '*%/%' then split_part(c.instance_id, '/', 2) = lc.from_lanes::text
                                  else false end) as changing
      ) l
      cross join lateral (
        select c.status in ('idle', 'processing') and c.attempts = 0 and c.cursor >= h.head and c.gap_count = 0
               and c.oldest_gap_at is null and c.start_fence is null and c.skip_event_id is null
               and (c.name, c.instance_id) not in (
                 select d.consumer_name, d.instance_id from ${t.deadLetters} d
                 where d.replay_requested_at is not null and d.replayed_at is null)
               and not l.changing
               and not ${PARKED_KEYS(sql, t, true)} as quiet
      ) q
      left join lateral (
        select ${STATE_COLUMNS(sql, t)},
               case when c.cursor < h.head then
                 (select extract(epoch from now() - e.created_at)::float8 from ${t.events} e
                  where e.id > c.cursor order by e.id limit 1)
               end as lag_seconds,
               l.changing as lane_changing,
               ${PARKED_KEYS(sql, t, true)} as parked_replays,
               -- A strict consumer waits at a hole only when a range starts right after its cursor
               -- (one left behind it by fast ordering before a restart does not hold it up).
               case when c.gap_count > 0 then exists (
                 select 1 from ${t.gaps} g
                 where g.consumer_name = c.name and g.instance_id = c.instance_id and g.from_id = c.cursor + 1)
               else false end as waits_at_hole
        where not q.quiet
        offset 0 -- kept a subquery: the columns of a quiet consumer are not even computed
      ) s on true
      -- Not c.name = any(...): each pooled connection plans its first five runs of a prepared
      -- statement with the values, and the planner then weighs each name of the list (with 100
      -- consumers, 4 ms a plan against 0.6 ms for this form; a consumers table is small).
      where (left(c.instance_id, 1) = '*' and array[c.name] <@ ${keys.shared}::text[])
         or (c.instance_id = ${keys.ownInstance} and array[c.name] <@ ${keys.own}::text[])
    ) a`;
  if (result === undefined) throw new Error('the idle pre-check returned no row');
  const rows = new Map<string, PrecheckRow>();
  const lanes = new Map<string, string[]>();
  const sharedRow = (name: string, instanceId: string) => {
    if (!isSharedInstanceId(instanceId)) return;
    const ids = lanes.get(name);
    if (ids) ids.push(instanceId);
    else lanes.set(name, [instanceId]);
  };
  const quiet = new Set<string>();
  for (const entry of result.quiet) {
    if (typeof entry === 'string') {
      quiet.add(entry);
      if (keys.sharedNames.has(entry)) sharedRow(entry, SHARED_INSTANCE_ID);
    } else {
      quiet.add(unitKey(entry[0], entry[1]));
      sharedRow(entry[0], entry[1]);
    }
  }
  for (const row of result.rows) {
    sharedRow(row.name, row.instance_id);
    rows.set(unitKey(row.name, row.instance_id), {
      ...row,
      last_error_at: dateOrNull(row.last_error_at),
      updated_at: new Date(row.updated_at as string),
      disabled_until: dateOrNull(row.disabled_until),
      oldest_gap_at: dateOrNull(row.oldest_gap_at),
      last_progress_at: dateOrNull(row.last_progress_at),
      head: result.head,
      snapshot: result.snapshot,
      now: result.now,
    });
  }
  return {
    quiet,
    rows,
    lanes,
    snapshot: result.snapshot,
    head: result.head,
    dispatchers: result.dispatchers,
  };
}

/**
 * The cluster's current snapshot, as text. A snapshot (xmin, xmax and the xids running below xmax)
 * fixes which transactions have ended: while it stays the same, no transaction has committed
 * anywhere, so every row and id an earlier statement read under it is as it was.
 */
export async function currentSnapshot(sql: Sql): Promise<string> {
  const [row] = await sql<{ snapshot: string }[]>`select pg_current_snapshot()::text as snapshot`;
  if (row === undefined) throw new Error('pg_current_snapshot() returned no row');
  return row.snapshot;
}

function dateOrNull(text: string | null): Date | null {
  return text === null ? null : new Date(text);
}

export interface LockedRow extends ConsumerStateRow {
  /** The turn's xid: assigned by its row lock, so allocated after every earlier holder's commit. */
  xid: string;
  /** A snapshot taken once the row is held. */
  snapshot: string;
  /** The database's clock once the row is held. */
  now: Date;
  max_fence: string | null;
  /** The row's xmin: the (sub)transaction that last wrote it (its lock does not change it). */
  row_xmin: string;
  marker_first: string | null;
  marker_last: string | null;
  marker_started: number | null;
  marker_isolate_until: string | null;
  /** A change of the consumer's lane count in progress (docs/design.md §11.3), if any. */
  lane_from: number | null;
  lane_to: number | null;
  lane_barrier: string | null;
  lane_switched: boolean | null;
  /** Parked keys of the consumer whose replay an operator asked for. */
  parked_replays: boolean;
  /** Some key of the consumer is parked. */
  parked_keys: boolean;
}

/** The held row as the turn reads it, or undefined when another instance holds it. */
export interface ConsumerLock {
  readonly row: Promise<LockedRow | undefined>;
}

/**
 * Locks the consumer's row for this turn (FOR UPDATE SKIP LOCKED, docs/design.md §4.3) and reads everything
 * the turn decides on, in two statements sent together (one round trip).
 *
 * The order matters, and is the rule of docs/guarantees.md ("the fence is drawn after the row is
 * held"): a locking statement's select list, and every subquery in it, is computed from the
 * statement's snapshot *before* the row is locked. When another instance locks the row, records a
 * hole and commits in between, PostgreSQL locks the new row version (EvalPlanQual), but anything
 * that statement read or drew in its select list is older than that commit. An xid drawn there can
 * be older than the writer of the hole the other instance recorded: as a fence it lets the hole
 * burn while that writer is still open (a lost event). Its snapshot and its reads of the gaps,
 * turn starts and dead letters are stale too (an empty gap watch: a late event stalls for as long
 * as an unrelated transaction stays open).
 *
 * So the locking statement reads nothing the turn uses and draws no xid: the row lock itself
 * assigns the transaction's xid (PostgreSQL assigns it when it writes the lock into the row, after
 * any earlier holder committed). The second statement runs once the first has returned, with a
 * snapshot of its own taken after the lock, and reads the row (which nobody else can change now),
 * that xid, the snapshot, the clock, and the consumer's other tables. When the row was skipped, the
 * second statement's answer is ignored and it assigned no xid (pg_current_xact_id_if_assigned).
 * Also bounds the turn's statements and idle time (SET LOCAL), and writes its times in ISO, as
 * start() found the sessions (refuseSessionSettings), whatever a transactional handler's SET of the
 * session's DateStyle through ctx.tx left on this connection.
 */
export function lockConsumer(
  tx: TransactionSql,
  t: Tables,
  name: string,
  instanceId: string,
  timeouts: { statementTimeoutMs: number; idleInTransactionTimeoutMs: number },
): ConsumerLock {
  const locking = tx<{ name: string }[]>`
    select c.name,
           set_config('statement_timeout', ${String(timeouts.statementTimeoutMs)}, true) as statement_timeout,
           set_config('idle_in_transaction_session_timeout', ${String(timeouts.idleInTransactionTimeoutMs)}, true) as idle_timeout,
           set_config('DateStyle', 'ISO', true) as date_style
    from ${t.consumers} c
    where c.name = ${name} and c.instance_id = ${instanceId}
    for update of c skip locked`;
  const reading = tx<LockedRow[]>`
    select ${STATE_COLUMNS(tx, t)},
           pg_current_xact_id_if_assigned()::text as xid, pg_current_snapshot()::text as snapshot,
           statement_timestamp() as now, c.xmin::text as row_xmin,
           (select max(g.fence)::text from ${t.gaps} g
            where g.consumer_name = c.name and g.instance_id = c.instance_id) as max_fence,
           m.first_event_id::text as marker_first, m.last_event_id::text as marker_last,
           m.started_count as marker_started, m.isolate_until::text as marker_isolate_until,
           l.from_lanes as lane_from, l.to_lanes as lane_to, l.barrier::text as lane_barrier,
           l.switched_at is not null as lane_switched,
           ${PARKED_KEYS(tx, t, true)} as parked_replays, ${PARKED_KEYS(tx, t, false)} as parked_keys
    from ${t.consumers} c
    left join ${t.turnStarts} m on m.consumer_name = c.name and m.instance_id = c.instance_id
    left join ${t.laneChanges} l on l.consumer_name = c.name and left(c.instance_id, 1) = '*'
    where c.name = ${name} and c.instance_id = ${instanceId}`;
  // Both are sent now, the read right behind the lock (a query runs once something waits on it).
  locking.catch(() => undefined);
  reading.catch(() => undefined);
  return {
    row: locking.then(async ([held]) => {
      if (!held) return undefined;
      const [row] = await reading;
      if (!row)
        throw new Error(`the locked consumer row ${name}/${instanceId} was not found by the turn's read`);
      if ((row.xid as string | null) === null)
        throw new Error('the consumer row lock assigned no transaction id');
      return row;
    }),
  };
}

export interface TurnUpdate {
  cursor: bigint;
  status: 'idle' | 'processing' | 'dead';
  attempts: number;
  stuckEventId: bigint | null;
  skipEventId: bigint | null;
  lastError: string | null;
  rearmCount: number;
  progressed: boolean;
  gapCountDelta: number;
  gapsUnfenced: number;
  gapWatch: readonly bigint[];
  gapsRecheck: boolean;
  /**
   * 'now' consumers: how far the delivery of the events in flight at registration has got; 'done'
   * clears the start columns, 'unchanged' leaves them.
   */
  start: bigint | 'done' | 'unchanged';
  systemIdentifier: string | null;
}

/**
 * Persists a turn's outcome on the locked row (same transaction as the gap changes). Returns the
 * row's xmin as written: the (sub)transaction that wrote it, which is the turn's own xid only when
 * no savepoint of the turn is still open (a transactional consumer's handlers run in savepoints).
 */
export async function saveTurn(
  tx: TransactionSql,
  t: Tables,
  name: string,
  instanceId: string,
  u: TurnUpdate,
): Promise<bigint | undefined> {
  const [written] = await tx<{ xmin: string }[]>`
    update ${t.consumers} c set
      cursor = ${u.cursor.toString()}::bigint,
      status = ${u.status},
      attempts = ${u.attempts},
      stuck_event_id = ${u.stuckEventId === null ? null : u.stuckEventId.toString()}::bigint,
      skip_event_id = ${u.skipEventId === null ? null : u.skipEventId.toString()}::bigint,
      last_error = case when ${u.lastError}::text is null then c.last_error else ${u.lastError}::text end,
      last_error_at = case when ${u.lastError}::text is null then c.last_error_at else now() end,
      failure_category = case when ${u.lastError}::text is null then c.failure_category else 'handler' end,
      rearm_count = ${u.rearmCount},
      gap_count = c.gap_count + ${u.gapCountDelta},
      gaps_unfenced = ${u.gapsUnfenced},
      gap_watch = ${pgArray(u.gapWatch)}::xid8[],
      gaps_recheck = ${u.gapsRecheck},
      gap_min_fence = (select min(g.fence) from ${t.gaps} g where g.consumer_name = c.name and g.instance_id = c.instance_id),
      oldest_gap_at = (select g.observed_at from ${t.gaps} g
                       where g.consumer_name = c.name and g.instance_id = c.instance_id order by g.from_id limit 1),
      start_snapshot = case when ${u.start === 'done'} then null else c.start_snapshot end,
      start_fence = case when ${u.start === 'done'} then null else c.start_fence end,
      start_upto = case when ${u.start === 'done'} then null else c.start_upto end,
      start_after = case when ${u.start === 'done'} then null
                         else coalesce(${typeof u.start === 'bigint' ? u.start.toString() : null}::bigint, c.start_after) end,
      system_identifier = coalesce(${u.systemIdentifier}::text, c.system_identifier),
      last_progress_at = case when ${u.progressed} then now() else c.last_progress_at end,
      last_seen_at = case when left(c.instance_id, 1) <> '*' then now() else c.last_seen_at end,
      updated_at = now()
    where c.name = ${name} and c.instance_id = ${instanceId}
    returning c.xmin::text as xmin`;
  return written === undefined ? undefined : BigInt(written.xmin);
}

/** Status changes decided at the start of a turn: an expired time-boxed disable, a re-arm. */
export async function setStatus(
  tx: TransactionSql,
  t: Tables,
  name: string,
  instanceId: string,
  change: { status: 'idle'; clearDisable?: boolean; rearm?: boolean },
) {
  await tx`
    update ${t.consumers} set
      status = ${change.status},
      disabled_until = case when ${change.clearDisable ?? false} then null else disabled_until end,
      disabled_reason = case when ${change.clearDisable ?? false} then null else disabled_reason end,
      attempts = case when ${change.rearm ?? false} then 0 else attempts end,
      updated_at = now()
    where name = ${name} and instance_id = ${instanceId}`;
}

/**
 * What a failed turn found once it held its row, for a failure recorded after the turn ended (its
 * own transaction is gone by then, and so is its lock).
 */
export interface FailedTurn {
  /**
   * The row's xmin when the turn held it, or null when the turn failed before that. Another
   * instance may take the row over between the failed turn's end and this record (deliver the
   * event, count the turn's start as a crash): then the row has been written since, and what the
   * failed turn decided on is stale. A record made from it must not land.
   */
  readonly heldXmin: bigint | null;
  /** The failed turn sent its start record (crash accounting), which it may take back. */
  readonly startSent: boolean;
}

/**
 * Records an infrastructure failure outside the failed turn (best effort, docs/design.md §4.5).
 * The start the turn recorded is taken back (the process survived: it was no crash) only while
 * the row is as the turn found it: once another instance has written the row, it has judged that
 * start already, and a later start at the same event may be its own.
 */
export async function recordInfraFailure(
  sql: Sql,
  t: Tables,
  name: string,
  instanceId: string,
  failure: { message: string; category: string; undoTurnStart: boolean; turn: FailedTurn },
) {
  await guardedBegin(sql, async (tx) => {
    const unchanged = rowUnchangedSince(tx, failure.turn.heldXmin);
    await tx`select set_config('lock_timeout', '2000', true)`;
    // A timed-out transactional attempt still waiting for its turn keeps its record: that turn
    // reads it to apply the error policy without another call (DeliveryPlan.spent).
    const keeps = tx`c.failure_category = 'handler-timeout' and c.stuck_event_id is not null`;
    const updated = await tx`
      update ${t.consumers} c set
        last_error = case when ${keeps} then c.last_error else ${failure.message} end,
        failure_category = case when ${keeps} then c.failure_category else ${failure.category} end,
        last_error_at = now(), updated_at = now()
      where name = ${name} and instance_id = ${instanceId} and ${unchanged}`;
    if (failure.undoTurnStart && failure.turn.startSent && updated.count === 1) {
      await startTakenBack(tx, t, name, instanceId);
    }
  });
}

/**
 * Matches the consumer row (alias c) while its xmin is `heldXmin` (always, when null). An UPDATE
 * that waited for another writer's lock evaluates it on the row version that writer committed.
 */
function rowUnchangedSince(q: Queryable, heldXmin: bigint | null) {
  return heldXmin === null ? q`true` : q`c.xmin = ${heldXmin.toString()}::xid`;
}

/**
 * Refreshes last_seen_at of this process's per-instance rows (they are not stale while it runs).
 * A row a turn holds is skipped, not waited for: the turn's own commit refreshes it (saveTurn), and
 * a wait would hold up the pass, and every other consumer with it, behind a slow handler (and fail
 * at the turn's commit under a REPEATABLE READ default).
 */
export async function heartbeat(sql: Sql, t: Tables, names: readonly string[], instanceId: string) {
  await sql`
    update ${t.consumers} c set last_seen_at = now()
    from (select name, instance_id from ${t.consumers}
          where instance_id = ${instanceId} and name = any(${pgArray(names)}::text[])
          for update skip locked) free
    where c.name = free.name and c.instance_id = free.instance_id`;
}

/**
 * Counts a handler attempt outside the turn that made it: a transactional handler that overran its
 * time holds the turn's transaction, so that turn is rolled back and its attempt recorded here.
 * Only while the row is as the rolled-back turn found it: an instance that took the row over
 * meanwhile has delivered the event, or counted this turn's start as a crash of its own accord,
 * and the attempts and stuck event decided from the old row would undo that (a consumer stuck, or
 * dead, on an event already delivered). Then the attempt goes uncounted here: it was counted by
 * that instance as a crashed start, or the event is done.
 * @returns whether the attempt was recorded
 */
export async function recordFailedAttempt(
  sql: Sql,
  t: Tables,
  name: string,
  instanceId: string,
  failure: {
    eventId: bigint;
    attempts: number;
    message: string;
    /**
     * A transactional handler's timeout (its turn rolled back) that used up the last attempt:
     * recorded as 'handler-timeout'.
     */
    timedOut: boolean;
    turn: FailedTurn;
  },
): Promise<boolean> {
  return guardedBegin(sql, async (tx) => {
    const unchanged = rowUnchangedSince(tx, failure.turn.heldXmin);
    await tx`select set_config('lock_timeout', '5000', true)`;
    const updated = await tx`
      update ${t.consumers} c set attempts = ${failure.attempts}, stuck_event_id = ${failure.eventId.toString()}::bigint,
        last_error = ${failure.message}, last_error_at = now(),
        failure_category = ${failure.timedOut ? 'handler-timeout' : 'handler'}, updated_at = now()
      where name = ${name} and instance_id = ${instanceId} and ${unchanged}`;
    if (updated.count === 0) return false;
    if (failure.turn.startSent) {
      // The attempt is counted now: its start must not count again as a crash.
      await startTakenBack(tx, t, name, instanceId);
    }
    return true;
  });
}

export interface OperatorRow extends ConsumerStateRow {
  now: Date;
  disabled_reason: string | null;
  last_seen_at: Date | null;
  created_at: Date;
}

/**
 * The dispatcher's own row lock (FOR UPDATE), taken by operator actions: it waits for a running
 * turn to commit, up to the transaction's lock_timeout, instead of skipping (docs/design.md §6.2). As in
 * lockConsumer, the row and everything an action decides on are read by a second statement, once
 * the row is held: a lock that waited for a turn's commit locks the new row version, but its own
 * select list would still show the world from before that commit.
 */
export async function lockConsumerForOperator(
  tx: TransactionSql,
  t: Tables,
  name: string,
  instanceId: string,
): Promise<OperatorRow | undefined> {
  const locking = tx<{ name: string }[]>`
    select c.name from ${t.consumers} c
    where c.name = ${name} and c.instance_id = ${instanceId}
    for update of c`;
  const reading = tx<OperatorRow[]>`
    select ${STATE_COLUMNS(tx, t)}, statement_timestamp() as now, c.disabled_reason,
           c.last_seen_at, c.created_at
    from ${t.consumers} c
    where c.name = ${name} and c.instance_id = ${instanceId}`;
  // Sent in this order, the read right behind the lock (a query is sent once something waits on it).
  locking.catch(() => undefined);
  reading.catch(() => undefined); // fails with the lock, whose failure is the one reported
  const [held] = await locking;
  if (!held) return undefined;
  const [row] = await reading;
  return row;
}

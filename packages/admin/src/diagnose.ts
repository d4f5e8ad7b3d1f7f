import { listRanges, type StoredRange } from '@sluice/core/internal';
import { resolveInstances, type AdminContext } from './context.js';
import { showConsumer, type ConsumerSummary } from './read-models.js';
import { checkName, optionalName } from './validate.js';

/** A backend (or prepared transaction) that matters to a diagnosis, from pg_stat_activity. */
export interface Backend {
  readonly pid: number | null;
  readonly database: string | null;
  readonly applicationName: string | null;
  readonly state: string | null;
  readonly xactStart: Date | null;
  readonly xid: bigint | null;
  /** Set for a prepared transaction (no backend): its global id. */
  readonly preparedGid: string | null;
}

export interface Diagnosis {
  readonly consumer: ConsumerSummary;
  /** Why it is (not) moving, most important first, in plain words. */
  readonly findings: readonly string[];
  readonly oldestGap:
    | (StoredRange & {
        readonly ageSeconds: number;
        /** Transactions below the gap's fence that are still running: they keep it pending. */
        readonly heldBy: readonly Backend[];
      })
    | null;
  /** The backend holding the consumer's row right now (a turn in progress), if any. */
  readonly rowLockedBy: Backend | null;
  /** When the dispatcher may re-arm it (dead consumers with re-arms left). */
  readonly nextRearmAt: Date | null;
  /** A consumer run as lanes: each lane's diagnosis (the fields above sum them up). */
  readonly lanes?: readonly Diagnosis[];
}

interface BackendRow {
  pid: number | null;
  datname: string | null;
  application_name: string | null;
  state: string | null;
  xact_start: Date | null;
  /** The 32-bit xid (pg_stat_activity and pg_prepared_xacts show no other). */
  xid: string | null;
  /** The xmax of the statement's snapshot, epoch and all. */
  xmax8: string;
  gid: string | null;
}

const XID_SPAN = 2n ** 32n;
const HALF_XID_SPAN = 2n ** 31n;

/**
 * The full (epoch-qualified) form of a 32-bit xid read beside `xmax8`, a snapshot's xmax: the one
 * nearest to it, as every running xid is within 2³¹ of it. Such an xid may come after the
 * snapshot (a backend that drew one since); taking it for an earlier epoch's made it 2³² too low,
 * negative before the first wraparound.
 */
export function widenXid(xid32: bigint, xmax8: bigint): bigint {
  const distance = (((xid32 - (xmax8 % XID_SPAN)) % XID_SPAN) + XID_SPAN + HALF_XID_SPAN) % XID_SPAN;
  return xmax8 + distance - HALF_XID_SPAN;
}

/**
 * Why a consumer is not moving (docs/design.md §6.2): cursor vs head, its oldest pending gap and the
 * backends whose transactions keep it open, whether a turn holds its row, its last error and
 * attempts, and when it can be re-armed. Reads only; takes no lock.
 * @throws {ConsumerNotFoundError}
 */
export async function diagnose(
  ctx: AdminContext,
  nameInput: string,
  options: { instanceId?: string } = {},
): Promise<Diagnosis> {
  const name = checkName(nameInput, 'name');
  const instanceIds = await resolveInstances(ctx.sql, ctx, name, optionalName(options.instanceId));
  const whole = await consumerFindings(ctx, name);
  if (instanceIds.length === 1) {
    const one = await diagnoseRow(ctx, name, instanceIds[0] as string);
    return { ...one, findings: [...whole, ...one.findings] };
  }
  // A consumer run as lanes (docs/design.md §11): each lane, its findings marked with the lane. One
  // after another: a pool of a few connections (the CLI's has two) would otherwise pipeline
  // statements, which a transaction pooler can lose the answers of.
  const lanes: Diagnosis[] = [];
  for (const id of instanceIds) lanes.push(await diagnoseRow(ctx, name, id));
  const consumer = await showConsumer(ctx, name);
  const findings = [...whole];
  const moving = lanes.filter((l) => !(l.findings.length === 1 && l.findings[0] === 'at the log head'));
  if (moving.length === 0) findings.push(`every lane (${lanes.length}) at the log head`);
  for (const lane of moving) {
    for (const finding of lane.findings) findings.push(`lane ${lane.consumer.instanceId}: ${finding}`);
  }
  const gaps = lanes.map((l) => l.oldestGap).filter((g) => g !== null);
  const oldestGap = gaps.sort((a, b) => b.ageSeconds - a.ageSeconds)[0] ?? null;
  return {
    consumer,
    findings,
    oldestGap,
    rowLockedBy: lanes.find((l) => l.rowLockedBy !== null)?.rowLockedBy ?? null,
    nextRearmAt: lanes.map((l) => l.nextRearmAt).find((at) => at !== null) ?? null,
    lanes,
  };
}

/**
 * What is true of the consumer as a whole: a change of its lane count in progress, and its parked
 * keys (docs/design.md §11).
 */
async function consumerFindings(ctx: AdminContext, name: string): Promise<string[]> {
  const t = ctx.tables;
  const [row] = await ctx.sql<
    {
      from_lanes: number | null;
      to_lanes: number | null;
      barrier: string | null;
      switched: boolean | null;
      parked: number;
      replaying: number;
    }[]
  >`
    select l.from_lanes, l.to_lanes, l.barrier::text as barrier, l.switched_at is not null as switched,
           (select count(*)::int from ${t.parkedKeys} p where p.consumer_name = ${name}) as parked,
           (select count(*)::int from ${t.parkedKeys} p
            where p.consumer_name = ${name} and p.replay_requested_at is not null) as replaying
    from (select 1) one left join ${t.laneChanges} l on l.consumer_name = ${name}`;
  const findings: string[] = [];
  if (row?.from_lanes != null && row.to_lanes != null) {
    findings.push(
      row.switched
        ? `changing from ${row.from_lanes} to ${row.to_lanes} lanes: switched at the barrier ${row.barrier ?? '?'}; the old lanes go once their pending gaps are resolved`
        : `changing from ${row.from_lanes} to ${row.to_lanes} lanes: the old lanes deliver up to the barrier ${row.barrier ?? '?'}, then the new lanes start there (a dead or disabled old lane holds the switch)`,
    );
  }
  if (row && row.parked > 0) {
    findings.push(
      `${row.parked} parked key(s): their events are set aside until an operator replays or drops them` +
        (row.replaying > 0 ? ` (${row.replaying} being replayed)` : ''),
    );
  }
  return findings;
}

async function diagnoseRow(ctx: AdminContext, name: string, instanceId: string): Promise<Diagnosis> {
  const consumer = await showConsumer(ctx, name, { instanceId });
  const ranges = await listRanges(ctx.sql, ctx.tables, name, instanceId);
  const findings: string[] = [];
  // Ages are measured by the database's clock, which dated the gaps (not this machine's).
  const [clock] = await ctx.sql<{ now: Date }[]>`select statement_timestamp() as now`;
  const now = (clock?.now ?? new Date(Number.NaN)).getTime();

  // Every backend with an xid, and every prepared transaction: their 32-bit xids, widened below
  // (widenXid) from the xmax of a snapshot of the same statement.
  const holders = await ctx.sql<BackendRow[]>`
    with s as (select pg_snapshot_xmax(pg_current_snapshot())::text as xmax8)
    select a.pid, a.datname, a.application_name, a.state, a.xact_start,
           a.backend_xid::text as xid, s.xmax8, null::text as gid
    from pg_stat_activity a, s where a.backend_xid is not null
    union all
    select null, p.database, null, 'prepared', p.prepared, p.transaction::text, s.xmax8, p.gid
    from pg_prepared_xacts p, s`;
  const backends = holders.map((r): Backend => ({
    pid: r.pid,
    database: r.datname,
    applicationName: r.application_name,
    state: r.state,
    xactStart: r.xact_start,
    xid: r.xid === null ? null : widenXid(BigInt(r.xid), BigInt(r.xmax8)),
    preparedGid: r.gid,
  }));
  let oldestGap: Diagnosis['oldestGap'] = null;
  const oldest = [...ranges].sort((a, b) => ((a.fence ?? 2n ** 63n) < (b.fence ?? 2n ** 63n) ? -1 : 1))[0];
  if (oldest) {
    const heldBy =
      oldest.fence === null ? [] : backends.filter((b) => b.xid !== null && b.xid < (oldest.fence as bigint));
    oldestGap = { ...oldest, ageSeconds: (now - oldest.observedAt.getTime()) / 1000, heldBy };
  }

  const [lock] = await ctx.sql<{ locker: string | null }[]>`
    select case when c.xmax::text <> '0' then c.xmax::text end as locker
    from ${ctx.tables.consumers} c where c.name = ${name} and c.instance_id = ${instanceId}`;
  // xmax is a 32-bit xid: it names the backend whose widened xid has the same low 32 bits.
  const lockerXid = lock?.locker ? BigInt(lock.locker) : null;
  const rowLockedBy =
    (lockerXid !== null && backends.find((b) => b.xid !== null && b.xid % 2n ** 32n === lockerXid)) || null;

  const nextRearmAt =
    consumer.status === 'dead' && consumer.rearmCount < ctx.maxRearmCount
      ? new Date(consumer.updatedAt.getTime() + ctx.rearmCooldownMs)
      : null;

  if (consumer.status === 'dead') {
    findings.push(
      `dead after ${consumer.attempts} failed attempt(s) on event ${consumer.stuckEventId ?? '?'}: ${consumer.lastError ?? 'no error recorded'}`,
    );
    findings.push(
      nextRearmAt
        ? `will be re-armed automatically at ${nextRearmAt.toISOString()} (re-arm ${consumer.rearmCount + 1}); or skip the event / restart it`
        : 'automatic re-arms are used up: skip the poison event or restart the consumer',
    );
  } else if (consumer.status === 'disabled') {
    findings.push(
      `disabled${consumer.disabledUntil ? ` until ${consumer.disabledUntil.toISOString()}` : ''}${consumer.disabledReason ? `: ${consumer.disabledReason}` : ''}`,
    );
  } else if (consumer.attempts > 0) {
    findings.push(
      `retrying event ${consumer.stuckEventId ?? '?'} (attempt ${consumer.attempts} failed): ${consumer.lastError ?? ''}`,
    );
  }
  if (consumer.failureCategory && !consumer.failureCategory.startsWith('handler') && consumer.lastErrorAt) {
    findings.push(
      `last infrastructure failure (${consumer.failureCategory}) at ${consumer.lastErrorAt.toISOString()}: ${consumer.lastError ?? ''}; the failing process retries it after its backoff (backoffInitialMs, doubling up to backoffMaxMs)`,
    );
  }
  if (consumer.lagEvents > 0n) {
    findings.push(
      `${consumer.lagEvents} event(s) behind the head (${consumer.head})` +
        (consumer.lastProgressAt
          ? `, last progress ${consumer.lastProgressAt.toISOString()}`
          : ', no progress recorded yet'),
    );
  } else {
    findings.push('at the log head');
  }
  if (oldestGap) {
    const holdersText = oldestGap.heldBy
      .map((b) =>
        b.preparedGid !== null
          ? `prepared transaction "${b.preparedGid}"`
          : `pid ${b.pid ?? '?'} (${b.applicationName || 'no application_name'}, ${b.state ?? '?'}, in ${b.database ?? '?'}, transaction since ${b.xactStart?.toISOString() ?? '?'})`,
      )
      .join('; ');
    findings.push(
      `${consumer.pendingGaps} pending gap range(s); the oldest, ids ${oldestGap.from}–${oldestGap.to}, is ${Math.round(oldestGap.ageSeconds)} s old` +
        (oldestGap.fence === null
          ? ' and not fenced yet (the next turn does it)'
          : oldestGap.heldBy.length > 0
            ? ` and held open by: ${holdersText}`
            : ' and no transaction holds it any more: the next turn resolves it'),
    );
  }
  if (rowLockedBy) {
    findings.push(
      `a turn holds its row now: pid ${rowLockedBy.pid ?? '?'} (${rowLockedBy.applicationName || 'no application_name'})`,
    );
  }
  return { consumer, findings, oldestGap, rowLockedBy, nextRearmAt };
}

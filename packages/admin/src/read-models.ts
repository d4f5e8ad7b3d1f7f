import {
  ConsumerNotFoundError,
  DeadLetterNotFoundError,
  EventNotFoundError,
  InvalidOptionError,
  KeyNotParkedError,
} from '@sluice/core';
import {
  eventFromRow,
  listRanges,
  parseLaneInstanceId,
  pgArray,
  type EventRow,
  type StoredRange,
} from '@sluice/core/internal';
import { assertRegistered, resolveInstances, type AdminContext } from './context.js';
import { checkEventId, checkLimit, checkName, checkText, optionalName } from './validate.js';

export type ConsumerStatus = 'idle' | 'processing' | 'dead' | 'disabled';

/** One cursor row as operators see it. */
export interface ConsumerSummary {
  readonly name: string;
  /** '*' for a shared consumer, else the instance that owns this cursor. */
  readonly instanceId: string;
  readonly status: ConsumerStatus;
  readonly cursor: bigint;
  readonly head: bigint;
  readonly lagEvents: bigint;
  /** Age of the oldest event not reached yet; null when at the head. */
  readonly lagSeconds: number | null;
  readonly pendingGaps: number;
  readonly oldestGapAgeSeconds: number | null;
  readonly attempts: number;
  readonly stuckEventId: bigint | null;
  readonly lastError: string | null;
  readonly lastErrorAt: Date | null;
  /**
   * Set when the last error is past: the cursor advanced after it (`lastProgressAt` later than
   * `lastErrorAt`) and the consumer is neither retrying, dead nor disabled. Null while the error is
   * current, or when there is none (the error text is kept after a recovery; only a restart clears
   * it). By the database's clock: the time of the first operator `skip` or `enable` of this row
   * after the error when one resolved it (see `lastErrorResolvedBy`), else `lastProgressAt`. A
   * consumer that recovered by itself (a retry succeeded, an automatic re-arm) leaves no record of
   * that moment, only of its latest advance: the error was resolved at or before this time.
   */
  readonly lastErrorResolvedAt: Date | null;
  /** The operator action that resolved the last error (`skip by alice`); null when none did. */
  readonly lastErrorResolvedBy: string | null;
  readonly failureCategory: string | null;
  readonly rearmCount: number;
  readonly disabledUntil: Date | null;
  readonly disabledReason: string | null;
  readonly lastSeenAt: Date | null;
  readonly lastProgressAt: Date | null;
  readonly updatedAt: Date;
  /**
   * While behind the head: how long since the cursor last advanced (or the row last changed), by
   * the database's clock; null when at the head.
   */
  readonly stagnationSeconds: number | null;
  /** Dead letters awaiting action: neither replayed nor asked to be. */
  readonly deadLetters: number;
  /** This row as a lane of its consumer (docs/design.md §11): null for a per-instance row. */
  readonly lane: { readonly index: number; readonly count: number } | null;
  /** Keys the consumer has parked (its whole, every lane). */
  readonly parkedKeys: number;
  /** A change of the consumer's lane count in progress. */
  readonly laneChange: {
    readonly from: number;
    readonly to: number;
    readonly barrier: bigint;
    readonly switched: boolean;
  } | null;
  /** A consumer run as lanes, summed up by showConsumer(): each lane's row. */
  readonly lanes?: readonly ConsumerSummary[];
}

interface SummaryRow {
  name: string;
  instance_id: string;
  status: ConsumerStatus;
  cursor: string;
  head: string;
  lag_seconds: number | null;
  gap_count: number;
  oldest_gap_age: number | null;
  attempts: number;
  stuck_event_id: string | null;
  last_error: string | null;
  last_error_at: Date | null;
  last_error_resolved_at: Date | null;
  last_error_resolved_by: string | null;
  failure_category: string | null;
  rearm_count: number;
  disabled_until: Date | null;
  disabled_reason: string | null;
  last_seen_at: Date | null;
  last_progress_at: Date | null;
  updated_at: Date;
  stagnation_seconds: number | null;
  dead_letters: number;
  parked_keys: number;
  lane_from: number | null;
  lane_to: number | null;
  lane_barrier: string | null;
  lane_switched: boolean | null;
}

async function summaries(ctx: AdminContext, name?: string): Promise<ConsumerSummary[]> {
  const t = ctx.tables;
  const rows = await ctx.sql<SummaryRow[]>`
    select c.name, c.instance_id, c.status, c.cursor::text, h.head::text,
           case when c.cursor < h.head then
             (select extract(epoch from now() - e.created_at)::float8 from ${t.events} e
              where e.id > c.cursor order by e.id limit 1)
           end as lag_seconds,
           c.gap_count, extract(epoch from now() - c.oldest_gap_at)::float8 as oldest_gap_age,
           c.attempts, c.stuck_event_id::text, c.last_error, c.last_error_at, c.failure_category, c.rearm_count,
           c.disabled_until, c.disabled_reason, c.last_seen_at, c.last_progress_at, c.updated_at,
           case when r.resolved then coalesce(o.at, c.last_progress_at) end as last_error_resolved_at,
           case when r.resolved then o.action || ' by ' || o.actor end as last_error_resolved_by,
           case when c.cursor < h.head then
             extract(epoch from now() - coalesce(c.last_progress_at, c.created_at))::float8
           end as stagnation_seconds,
           (select count(*)::int from ${t.deadLetters} d
            where d.consumer_name = c.name and d.instance_id = c.instance_id
              and d.replayed_at is null and d.replay_requested_at is null) as dead_letters,
           (select count(*)::int from ${t.parkedKeys} p where p.consumer_name = c.name) as parked_keys,
           l.from_lanes as lane_from, l.to_lanes as lane_to, l.barrier::text as lane_barrier,
           l.switched_at is not null as lane_switched
    from ${t.consumers} c
    left join ${t.laneChanges} l on l.consumer_name = c.name and left(c.instance_id, 1) = '*'
    cross join (select coalesce(max(id), 0) as head from ${t.events}) h
    cross join lateral (
      select c.last_error is not null and c.attempts = 0 and c.status in ('idle', 'processing')
             and c.last_progress_at > c.last_error_at as resolved
    ) r
    left join lateral (
      select a.at, a.action, a.actor from ${t.audit} a
      where r.resolved and a.consumer_name = c.name and a.instance_id = c.instance_id
        and a.action in ('skip', 'enable') and a.at >= c.last_error_at
      order by a.at, a.id limit 1
    ) o on true
    where ${name === undefined} or c.name = ${name ?? ''}
    order by c.name, c.instance_id`;
  return rows.map(toSummary);
}

function toSummary(r: SummaryRow): ConsumerSummary {
  const cursor = BigInt(r.cursor);
  const head = BigInt(r.head);
  return {
    name: r.name,
    instanceId: r.instance_id,
    status: r.status,
    cursor,
    head,
    lagEvents: cursor < head ? head - cursor : 0n,
    lagSeconds: r.lag_seconds,
    pendingGaps: r.gap_count,
    oldestGapAgeSeconds: r.oldest_gap_age,
    attempts: r.attempts,
    stuckEventId: r.stuck_event_id === null ? null : BigInt(r.stuck_event_id),
    lastError: r.last_error,
    lastErrorAt: r.last_error_at,
    lastErrorResolvedAt: r.last_error_resolved_at,
    lastErrorResolvedBy: r.last_error_resolved_by,
    failureCategory: r.failure_category,
    rearmCount: r.rearm_count,
    disabledUntil: r.disabled_until,
    disabledReason: r.disabled_reason,
    lastSeenAt: r.last_seen_at,
    lastProgressAt: r.last_progress_at,
    updatedAt: r.updated_at,
    stagnationSeconds: r.stagnation_seconds,
    deadLetters: r.dead_letters,
    lane: parseLaneInstanceId(r.instance_id),
    parkedKeys: r.parked_keys,
    laneChange:
      r.lane_from === null || r.lane_to === null || r.lane_barrier === null
        ? null
        : {
            from: r.lane_from,
            to: r.lane_to,
            barrier: BigInt(r.lane_barrier),
            switched: r.lane_switched === true,
          },
  };
}

const STATUS_WEIGHT: Record<ConsumerStatus, number> = { idle: 0, processing: 1, disabled: 2, dead: 3 };

/**
 * A consumer run as lanes, summed up: the most serious status of its lanes, the lowest cursor, the
 * largest lag and stagnation, the sums of gaps and dead letters, the failing lane's error and
 * attempts; each lane's row in `lanes`.
 */
function laneSum(lanes: readonly ConsumerSummary[]): ConsumerSummary {
  const worst = [...lanes].sort(
    (a, b) => STATUS_WEIGHT[b.status] - STATUS_WEIGHT[a.status] || b.attempts - a.attempts,
  )[0] as ConsumerSummary;
  const min = (values: bigint[]) => values.reduce((a, b) => (a < b ? a : b));
  const maxOf = (values: (number | null)[]) =>
    values.reduce<number | null>((a, b) => (b === null ? a : a === null || b > a ? b : a), null);
  const cursor = min(lanes.map((l) => l.cursor));
  return {
    ...worst,
    instanceId: '*',
    cursor,
    lagEvents: lanes.map((l) => l.lagEvents).reduce((a, b) => (a > b ? a : b)),
    lagSeconds: maxOf(lanes.map((l) => l.lagSeconds)),
    pendingGaps: lanes.reduce((sum, l) => sum + l.pendingGaps, 0),
    oldestGapAgeSeconds: maxOf(lanes.map((l) => l.oldestGapAgeSeconds)),
    stagnationSeconds: maxOf(lanes.map((l) => l.stagnationSeconds)),
    deadLetters: lanes.reduce((sum, l) => sum + l.deadLetters, 0),
    lane: null,
    lanes,
  };
}

/** Every cursor row: status, cursor, head, lag, gaps, errors, instance rows. */
export function listConsumers(ctx: AdminContext): Promise<ConsumerSummary[]> {
  return summaries(ctx);
}

export interface ConsumerDetail extends ConsumerSummary {
  /** The first pending gap ranges (at most 100), oldest first. */
  readonly gaps: readonly StoredRange[];
}

/** One cursor row with its first pending gaps. @throws {ConsumerNotFoundError} */
export async function showConsumer(
  ctx: AdminContext,
  nameInput: string,
  options: { instanceId?: string } = {},
): Promise<ConsumerDetail> {
  const name = checkName(nameInput, 'name');
  const instanceIds = await resolveInstances(ctx.sql, ctx, name, optionalName(options.instanceId));
  const rows = await summaries(ctx, name);
  if (instanceIds.length > 1) {
    const lanes = rows.filter((r) => instanceIds.includes(r.instanceId));
    if (lanes.length === 0) throw new ConsumerNotFoundError(name);
    return { ...laneSum(lanes), gaps: [] };
  }
  const instanceId = instanceIds[0] as string;
  const summary = rows.find((s) => s.instanceId === instanceId);
  // Deleted between the two reads (a collection of stale instances, say): not found, as after it.
  if (!summary) throw new ConsumerNotFoundError(name, instanceId);
  const gaps = (await listRanges(ctx.sql, ctx.tables, name, instanceId)).slice(0, 100);
  return { ...summary, gaps };
}

export interface DeadLetter {
  readonly id: bigint;
  readonly consumer: string;
  readonly instanceId: string;
  readonly eventId: bigint;
  readonly streamId: string;
  readonly type: string;
  readonly data: Record<string, unknown>;
  readonly metadata: Record<string, unknown>;
  readonly eventCreatedAt: Date;
  readonly reason: 'apply-error' | 'operator-skip';
  readonly error: string | null;
  readonly attempts: number;
  readonly createdAt: Date;
  readonly replayRequestedAt: Date | null;
  readonly replayedAt: Date | null;
}

interface DeadLetterRow {
  id: string;
  consumer_name: string;
  instance_id: string;
  event_id: string;
  stream_id: string;
  type: string;
  data: Record<string, unknown>;
  metadata: Record<string, unknown>;
  event_created_at: Date;
  reason: 'apply-error' | 'operator-skip';
  error: string | null;
  attempts: number;
  created_at: Date;
  replay_requested_at: Date | null;
  replayed_at: Date | null;
}

/** The most bytes of JSON a list of dead letters shows of one payload (data, metadata); showDeadLetter shows all. */
export const LISTED_PAYLOAD_BYTES = 65_536;

/**
 * A dead letter's columns. `listed`: a payload (data, metadata) larger than LISTED_PAYLOAD_BYTES
 * stands as `{ "$sluice.omitted": "<n> bytes: …" }`: a page of large events would otherwise make a
 * response of hundreds of megabytes (the dashboard's list of 100), or none at all. The sizes are
 * read from `bytes` (see LISTED_PAYLOAD_SIZES), each payload's text measured once.
 */
const DEAD_LETTER_COLUMNS = (ctx: AdminContext, listed = false) => {
  const payload = (column: 'data' | 'metadata') =>
    listed
      ? ctx.sql`case when ${ctx.sql('bytes.' + column)} > ${LISTED_PAYLOAD_BYTES}
                     then jsonb_build_object('$sluice.omitted',
                            ${ctx.sql('bytes.' + column)} || ' bytes: read the dead letter by its id')
                     else ${ctx.sql('d.' + column)} end as ${ctx.sql(column)}`
      : ctx.sql`${ctx.sql('d.' + column)}`;
  return ctx.sql`
  d.id::text, d.consumer_name, d.instance_id, d.event_id::text, d.stream_id, d.type, ${payload('data')}, ${payload('metadata')},
  d.event_created_at, d.reason, d.error, d.attempts, d.created_at, d.replay_requested_at, d.replayed_at`;
};

/** The JSON sizes of the payloads of dead letter `d`, as `bytes` (for DEAD_LETTER_COLUMNS' listed form). */
const LISTED_PAYLOAD_SIZES = (ctx: AdminContext) => ctx.sql`
  cross join lateral (select octet_length(d.data::text) as data, octet_length(d.metadata::text) as metadata) bytes`;

function toDeadLetter(r: DeadLetterRow): DeadLetter {
  return {
    id: BigInt(r.id),
    consumer: r.consumer_name,
    instanceId: r.instance_id,
    eventId: BigInt(r.event_id),
    streamId: r.stream_id,
    type: r.type,
    data: r.data,
    metadata: r.metadata,
    eventCreatedAt: r.event_created_at,
    reason: r.reason,
    error: r.error,
    attempts: r.attempts,
    createdAt: r.created_at,
    replayRequestedAt: r.replay_requested_at,
    replayedAt: r.replayed_at,
  };
}

/**
 * A consumer's dead letters, newest first; a payload over LISTED_PAYLOAD_BYTES is left out (see
 * DEAD_LETTER_COLUMNS). @throws {ConsumerNotFoundError}
 */
export async function listDeadLetters(
  ctx: AdminContext,
  nameInput: string,
  options: { instanceId?: string; limit?: number } = {},
): Promise<DeadLetter[]> {
  const name = checkName(nameInput, 'name');
  const limit = checkLimit(options.limit);
  // A consumer run as lanes: the dead letters of all of them.
  const instanceIds = await resolveInstances(ctx.sql, ctx, name, optionalName(options.instanceId));
  // Measured only for the page the limit keeps.
  const rows = await ctx.sql<DeadLetterRow[]>`
    select ${DEAD_LETTER_COLUMNS(ctx, true)}
    from (select * from ${ctx.tables.deadLetters} d
          where d.consumer_name = ${name} and d.instance_id = any(${pgArray(instanceIds)}::text[])
          order by d.id desc limit ${limit}) d
    ${LISTED_PAYLOAD_SIZES(ctx)}
    order by d.id desc`;
  return rows.map(toDeadLetter);
}

/**
 * One dead letter of a consumer, by its id (the `id` of {@link listDeadLetters}, not the event id).
 * @throws {ConsumerNotFoundError} @throws {DeadLetterNotFoundError} @throws {InvalidOptionError}
 */
export async function showDeadLetter(
  ctx: AdminContext,
  nameInput: string,
  options: { id: bigint; instanceId?: string },
): Promise<DeadLetter> {
  const name = checkName(nameInput, 'name');
  const id = checkEventId(options.id, 'id');
  const instanceIds = await resolveInstances(ctx.sql, ctx, name, optionalName(options.instanceId));
  const [row] = await ctx.sql<DeadLetterRow[]>`
    select ${DEAD_LETTER_COLUMNS(ctx)}
    from ${ctx.tables.deadLetters} d
    where d.id = ${id.toString()}::bigint and d.consumer_name = ${name}
      and d.instance_id = any(${pgArray(instanceIds)}::text[])`;
  if (!row) throw new DeadLetterNotFoundError(name, id);
  return toDeadLetter(row);
}

/** One event of the log as an operator opens it from a consumer (its stuck event, a gap id). */
export interface ConsumerEvent {
  readonly consumer: string;
  readonly instanceId: string;
  readonly id: bigint;
  readonly streamId: string;
  readonly type: string;
  readonly data: Record<string, unknown>;
  readonly metadata: Record<string, unknown>;
  readonly createdAt: Date;
  /**
   * The consumer is stuck on this event (retrying it, or dead on it): the one event `skip`
   * accepts, and what it would copy to the dead letters.
   */
  readonly stuck: boolean;
}

/**
 * One event of the log, read in the context of a consumer row (which must exist): its payload and
 * whether the consumer is stuck on it.
 * @throws {ConsumerNotFoundError} @throws {EventNotFoundError} @throws {InvalidOptionError}
 */
export async function showEvent(
  ctx: AdminContext,
  nameInput: string,
  options: { eventId: bigint; instanceId?: string },
): Promise<ConsumerEvent> {
  const name = checkName(nameInput, 'name');
  const eventId = checkEventId(options.eventId);
  const instanceIds = await resolveInstances(ctx.sql, ctx, name, optionalName(options.instanceId));
  const [row] = await ctx.sql<(EventRow & { stuck: boolean; instance_id: string | null })[]>`
    select e.id::text, e.stream_id, e.type, e.data, e.metadata, e.created_at,
           s.instance_id is not null as stuck, s.instance_id
    from ${ctx.tables.events} e
    left join lateral (
      select c.instance_id from ${ctx.tables.consumers} c
      where c.name = ${name} and c.instance_id = any(${pgArray(instanceIds)}::text[])
        and c.stuck_event_id = e.id and (c.attempts > 0 or c.status = 'dead')
      order by c.instance_id limit 1
    ) s on true
    where e.id = ${eventId.toString()}::bigint`;
  if (!row) throw new EventNotFoundError(eventId);
  return {
    consumer: name,
    // The row stuck on it (a lane of a laned consumer), else the row asked about.
    instanceId: row.instance_id ?? (instanceIds.length === 1 ? (instanceIds[0] as string) : '*'),
    ...eventFromRow(row),
    stuck: row.stuck,
  };
}

export interface AuditRecord {
  readonly id: bigint;
  readonly at: Date;
  readonly actor: string;
  readonly action: string;
  readonly consumer: string | null;
  readonly instanceId: string | null;
  readonly cursorBefore: bigint | null;
  readonly cursorAfter: bigint | null;
  readonly details: Record<string, unknown>;
}

/** The audit trail, newest first, optionally for one consumer. */
export async function listAudit(
  ctx: AdminContext,
  options: { consumer?: string; limit?: number } = {},
): Promise<AuditRecord[]> {
  const consumer = options.consumer === undefined ? undefined : checkName(options.consumer, 'consumer');
  const limit = checkLimit(options.limit);
  const rows = await ctx.sql<
    {
      id: string;
      at: Date;
      actor: string;
      action: string;
      consumer_name: string | null;
      instance_id: string | null;
      cursor_before: string | null;
      cursor_after: string | null;
      details: Record<string, unknown>;
    }[]
  >`
    select a.id::text, a.at, a.actor, a.action, a.consumer_name, a.instance_id,
           a.cursor_before::text, a.cursor_after::text, a.details
    from ${ctx.tables.audit} a
    where ${consumer === undefined} or a.consumer_name = ${consumer ?? ''}
    order by a.id desc limit ${limit}`;
  return rows.map((r) => ({
    id: BigInt(r.id),
    at: r.at,
    actor: r.actor,
    action: r.action,
    consumer: r.consumer_name,
    instanceId: r.instance_id,
    cursorBefore: r.cursor_before === null ? null : BigInt(r.cursor_before),
    cursorAfter: r.cursor_after === null ? null : BigInt(r.cursor_after),
    details: r.details,
  }));
}

export { checkText };

/** A key a consumer parked (docs/design.md §11.4). */
export interface ParkedKey {
  readonly key: string;
  /** The event whose failure parked it. */
  readonly firstEventId: bigint;
  readonly error: string | null;
  readonly attempts: number;
  readonly parkedAt: Date;
  /** Its events set aside, the first one included. */
  readonly events: number;
  /** An operator asked for a replay that has not happened yet. */
  readonly replayRequestedAt: Date | null;
}

/** A consumer's parked keys, by the id of the event that parked each. @throws {ConsumerNotFoundError} @throws {InvalidOptionError} */
export async function listParkedKeys(
  ctx: AdminContext,
  nameInput: string,
  options: { limit?: number } = {},
): Promise<ParkedKey[]> {
  const name = checkName(nameInput, 'name');
  const limit = checkLimit(options.limit);
  // Parked keys belong to the consumer's name (a per-instance consumer never parks one).
  await assertRegistered(ctx.sql, ctx, name);
  const rows = await ctx.sql<
    {
      key: string;
      first_event_id: string;
      error: string | null;
      attempts: number;
      parked_at: Date;
      events: number;
      replay_requested_at: Date | null;
    }[]
  >`
    select k.key, k.first_event_id::text, k.error, k.attempts, k.parked_at, k.replay_requested_at,
           (select count(*)::int from ${ctx.tables.parkedEvents} e
            where e.consumer_name = k.consumer_name and e.key = k.key) as events
    from ${ctx.tables.parkedKeys} k
    where k.consumer_name = ${name}
    order by k.first_event_id, k.key limit ${limit}`;
  return rows.map((r) => ({
    key: r.key,
    firstEventId: BigInt(r.first_event_id),
    error: r.error,
    attempts: r.attempts,
    parkedAt: r.parked_at,
    events: r.events,
    replayRequestedAt: r.replay_requested_at,
  }));
}

/** An event set aside under a parked key, as it was copied. */
export interface ParkedEvent {
  readonly key: string;
  readonly eventId: bigint;
  readonly streamId: string;
  readonly type: string;
  readonly data: Record<string, unknown>;
  readonly metadata: Record<string, unknown>;
  readonly eventCreatedAt: Date;
  readonly parkedAt: Date;
  /** The failure that parked the key, on its first event; null for the events set aside after it. */
  readonly error: string | null;
}

/**
 * The events a consumer set aside under one parked key, in id order (the order a replay delivers them).
 * @throws {ConsumerNotFoundError} @throws {KeyNotParkedError} @throws {InvalidOptionError}
 */
export async function listParkedEvents(
  ctx: AdminContext,
  nameInput: string,
  options: { key: string; limit?: number },
): Promise<ParkedEvent[]> {
  const name = checkName(nameInput, 'name');
  const key = checkText(options.key, 'key', 1000);
  if (key === undefined) throw new InvalidOptionError('key', 'is required: the parked key');
  const limit = checkLimit(options.limit);
  // Parked keys belong to the consumer's name (a per-instance consumer never parks one).
  await assertRegistered(ctx.sql, ctx, name);
  const rows = await ctx.sql<
    {
      key: string;
      event_id: string | null;
      stream_id: string;
      type: string;
      data: Record<string, unknown>;
      metadata: Record<string, unknown>;
      event_created_at: Date;
      parked_at: Date;
      error: string | null;
      parked: boolean;
    }[]
  >`
    select k.key, e.event_id::text, e.stream_id, e.type, e.data, e.metadata, e.event_created_at, e.parked_at,
           e.error, true as parked
    from ${ctx.tables.parkedKeys} k
    left join lateral (
      select * from ${ctx.tables.parkedEvents} pe
      where pe.consumer_name = k.consumer_name and pe.key = k.key order by pe.event_id limit ${limit}
    ) e on true
    where k.consumer_name = ${name} and k.key = ${key}
    order by e.event_id`;
  if (rows.length === 0) throw new KeyNotParkedError(name, key);
  return rows.flatMap((r) =>
    r.event_id === null
      ? []
      : [
          {
            key: r.key,
            eventId: BigInt(r.event_id),
            streamId: r.stream_id,
            type: r.type,
            data: r.data,
            metadata: r.metadata,
            eventCreatedAt: r.event_created_at,
            parkedAt: r.parked_at,
            error: r.error,
          },
        ],
  );
}

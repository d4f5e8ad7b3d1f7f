import { ConsumerNotFoundError, DeadLetterNotFoundError, EventNotFoundError } from '@sluice/core';
import { listRanges, type StoredRange } from '@sluice/core/internal';
import { resolveInstance, type AdminContext } from './context.js';
import { checkEventId, checkLimit, checkName, checkText } from './validate.js';

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
             extract(epoch from now() - coalesce(c.last_progress_at, c.updated_at))::float8
           end as stagnation_seconds,
           (select count(*)::int from ${t.deadLetters} d
            where d.consumer_name = c.name and d.instance_id = c.instance_id
              and d.replayed_at is null and d.replay_requested_at is null) as dead_letters
    from ${t.consumers} c
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
  const instanceId = await resolveInstance(ctx.sql, ctx, name, optionalName(options.instanceId));
  const summary = (await summaries(ctx, name)).find((s) => s.instanceId === instanceId);
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

const DEAD_LETTER_COLUMNS = (ctx: AdminContext) => ctx.sql`
  d.id::text, d.consumer_name, d.instance_id, d.event_id::text, d.stream_id, d.type, d.data, d.metadata,
  d.event_created_at, d.reason, d.error, d.attempts, d.created_at, d.replay_requested_at, d.replayed_at`;

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

/** A consumer's dead letters, newest first. @throws {ConsumerNotFoundError} */
export async function listDeadLetters(
  ctx: AdminContext,
  nameInput: string,
  options: { instanceId?: string; limit?: number } = {},
): Promise<DeadLetter[]> {
  const name = checkName(nameInput, 'name');
  const limit = checkLimit(options.limit);
  const instanceId = await resolveInstance(ctx.sql, ctx, name, optionalName(options.instanceId));
  const rows = await ctx.sql<DeadLetterRow[]>`
    select ${DEAD_LETTER_COLUMNS(ctx)}
    from ${ctx.tables.deadLetters} d
    where d.consumer_name = ${name} and d.instance_id = ${instanceId}
    order by d.id desc limit ${limit}`;
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
  const instanceId = await resolveInstance(ctx.sql, ctx, name, optionalName(options.instanceId));
  const [row] = await ctx.sql<DeadLetterRow[]>`
    select ${DEAD_LETTER_COLUMNS(ctx)}
    from ${ctx.tables.deadLetters} d
    where d.id = ${id.toString()}::bigint and d.consumer_name = ${name} and d.instance_id = ${instanceId}`;
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
  const instanceId = await resolveInstance(ctx.sql, ctx, name, optionalName(options.instanceId));
  const [row] = await ctx.sql<
    {
      id: string;
      stream_id: string;
      type: string;
      data: Record<string, unknown>;
      metadata: Record<string, unknown>;
      created_at: Date;
      stuck: boolean;
    }[]
  >`
    select e.id::text, e.stream_id, e.type, e.data, e.metadata, e.created_at,
           coalesce(c.stuck_event_id = e.id and (c.attempts > 0 or c.status = 'dead'), false) as stuck
    from ${ctx.tables.events} e
    left join ${ctx.tables.consumers} c on c.name = ${name} and c.instance_id = ${instanceId}
    where e.id = ${eventId.toString()}::bigint`;
  if (!row) throw new EventNotFoundError(eventId);
  return {
    consumer: name,
    instanceId,
    id: BigInt(row.id),
    streamId: row.stream_id,
    type: row.type,
    data: row.data,
    metadata: row.metadata,
    createdAt: row.created_at,
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

export function optionalName(value: unknown): string | undefined {
  return value === undefined ? undefined : checkName(value, 'instanceId');
}

export { checkText };

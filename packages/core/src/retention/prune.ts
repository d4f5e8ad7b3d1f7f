import { takeAdvisoryLocks } from '../queries/advisory-locks.js';
import { guardedBegin } from '../connections/guarded-transaction.js';
import { checkStorableName, MAX_AGE_MS, optionsObject, requirePool } from '../options.js';
import { BeyondHeadError, InvalidOptionError, PruneBlockedError, notMigratedOr } from '../errors.js';
import { logHead, retentionFloor, writeAudit } from '../queries/audit.js';
import { RETENTION_LOCK_CLASS } from '../queries/consumers.js';
import { resolveSchemaName, tables } from '../schema/tables.js';
import { type Sql, valuesOf } from '../sql-types.js';

export interface PruneOptions {
  /** Delete events with an id below this one. */
  before: bigint;
  /** @defaultValue 'sluice' */
  schema?: string;
  /**
   * Per-instance consumer rows not seen for this long belong to instances that are gone: they do
   * not hold retention back. @defaultValue 86_400_000 (24 h)
   */
  staleInstanceTtlMs?: number;
  /** Recorded in the audit table. @defaultValue 'sluice-prune' */
  actor?: string;
}

export interface PruneResult {
  readonly deleted: number;
}

/** Read by position (see valuesOf): the caller's pool may rename columns. */
type LaggingRow = [
  name: string,
  instanceId: string,
  status: string,
  cursor: string,
  gapFrom: string | null,
  nowStart: boolean,
];

/**
 * Deletes events below `before`, unless a registered consumer (of any status, apart from stale
 * per-instance rows) still needs one: a cursor below before - 1, a pending gap below before, or
 * a start still waiting for its stragglers, the events in flight at a 'now' registration or at a
 * restart (docs/design.md §6.3; invariant I6).
 * Holds the retention lock exclusively, so no consumer registers or restarts meanwhile.
 * @throws {PruneBlockedError} naming the lagging consumers; nothing is deleted then
 * @throws {BeyondHeadError} when `before` is above the one after the log head (nothing is deleted)
 */
export async function prune(sql: Sql, pruneOptions: PruneOptions): Promise<PruneResult> {
  requirePool(sql);
  const options = optionsObject(pruneOptions, {
    fields: ['before', 'schema', 'staleInstanceTtlMs', 'actor'],
    of: 'prune()',
  });
  const schema = resolveSchemaName(options.schema);
  if (typeof options.before !== 'bigint' || options.before < 1n || options.before > MAX_EVENT_ID) {
    throw new InvalidOptionError('before', `must be a bigint event id from 1 to ${MAX_EVENT_ID}`);
  }
  const actor = checkStorableName(options.actor ?? 'sluice-prune', 'actor');
  const ttlMs = options.staleInstanceTtlMs ?? 86_400_000;
  if (!Number.isSafeInteger(ttlMs) || ttlMs < 0 || ttlMs > MAX_AGE_MS)
    throw new InvalidOptionError(
      'staleInstanceTtlMs',
      `must be an integer from 0 to ${MAX_AGE_MS} (ten years)`,
    );
  const t = tables(sql, schema);
  const before = options.before.toString();
  return guardedBegin(sql, async (tx) => {
    await takeAdvisoryLocks(
      tx,
      () => tx`select pg_advisory_xact_lock(${RETENTION_LOCK_CLASS}, hashtext(${schema}))`,
    );
    // The floor this prune records must not pass the head: events still to come below it would
    // look pruned, and restarts and consumers from 'beginning' would skip them. Checked first: a
    // consumer at the head is below such a `before` too, and is not what is wrong.
    const head = await logHead(tx, t, await retentionFloor(tx, t));
    if (options.before > head + 1n) {
      throw new BeyondHeadError(
        options.before,
        head,
        `Cannot prune before ${options.before}: the log head is ${head}, and a retention floor above it ` +
          `would make the events still to come below ${options.before} look pruned (restarts and new ` +
          `consumers from 'beginning' would skip them). Nothing was deleted; prune before ${head + 1n} or lower`,
      );
    }
    // A retired version's rows never run again (docs/design.md §12.4): they hold nothing back. A row
    // is its version's by its own `version` (a version with side effects takes the rows over).
    const lagging = await valuesOf<LaggingRow>(tx`
      select c.name, c.instance_id, c.status, c.cursor::text,
             (select min(g.from_id)::text from ${t.gaps} g where g.consumer_name = c.name and g.instance_id = c.instance_id
                and g.from_id < ${before}::bigint),
             c.start_upto is not null
      from ${t.consumers} c
      where not (left(c.instance_id, 1) <> '*' and coalesce(c.last_seen_at, c.created_at) < now() - make_interval(secs => ${ttlMs / 1000}))
        and (c.cursor < ${before}::bigint - 1
             or c.start_upto is not null
             or exists (select 1 from ${t.gaps} g where g.consumer_name = c.name and g.instance_id = c.instance_id
                        and g.from_id < ${before}::bigint))
        and not exists (select 1 from ${t.consumerVersions} v
                        where v.row_name = c.name and v.version = c.version and v.state = 'retired')
      order by c.name, c.instance_id`);
    if (lagging.length > 0) {
      throw new PruneBlockedError(
        options.before,
        lagging.map(
          ([name, instanceId, status, cursor, gapFrom, nowStart]) =>
            `${name}${instanceId === '*' ? '' : `@${instanceId}`} (${status}, cursor ${cursor}` +
            // Below its cursor, what else holds the events back: said, or the refusal reads as wrong.
            (BigInt(cursor) < options.before - 1n
              ? ''
              : gapFrom !== null
                ? `, a pending gap from ${gapFrom}`
                : nowStart
                  ? `, a start still waiting for transactions in flight at its registration or restart`
                  : '') +
            ')',
        ),
      );
    }
    const deleted = await tx`delete from ${t.events} where id < ${before}::bigint`;
    // Restarts below the floor are refused later (they would skip pruned events silently).
    await writeAudit(tx, t, {
      actor,
      action: 'prune',
      consumerName: null,
      instanceId: null,
      cursorBefore: null,
      cursorAfter: null,
      details: { before: options.before, deleted: deleted.count },
    });
    return { deleted: deleted.count };
  }).catch((error: unknown) => {
    throw notMigratedOr(error, schema);
  });
}

/** The largest id a bigint column holds. */
const MAX_EVENT_ID = 2n ** 63n - 1n;

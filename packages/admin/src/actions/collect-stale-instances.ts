import { guardedBegin, InvalidOptionError, writeAudit } from '@sluice/core';
import type { AdminContext } from '../context.js';
import { checkText } from '../validate.js';

export interface StaleInstance {
  readonly consumer: string;
  readonly instanceId: string;
  readonly lastSeenAt: Date | null;
  readonly cursor: bigint;
}

interface CollectedRow {
  name: string;
  instance_id: string;
  last_seen_at: Date | null;
  cursor: string;
  lowest_pending_id: string | null;
  start_snapshot: string | null;
  start_fence: string | null;
  start_upto: string | null;
  start_after: string | null;
}

/**
 * Deletes per-instance cursor rows (and their gaps) of instances not seen for `olderThanMs`
 * (docs/design.md §4.9, per-instance). Rows locked by a running turn are left alone: that instance is alive.
 * An instance that was only cut off from the database re-registers its row where it was, from what
 * the audit records here (pending gaps are delivered again from their lowest id).
 * @throws {InvalidOptionError}
 */
export async function collectStaleInstances(
  ctx: AdminContext,
  options: { olderThanMs: number; actor?: string },
): Promise<{ removed: readonly StaleInstance[] }> {
  const { olderThanMs } = options;
  if (typeof olderThanMs !== 'number' || !Number.isSafeInteger(olderThanMs) || olderThanMs < 60_000) {
    throw new InvalidOptionError('olderThanMs', 'must be an integer of at least 60000 (one minute)');
  }
  const actor = checkText(options.actor, 'actor', 200) ?? ctx.defaultActor;
  const t = ctx.tables;
  return guardedBegin(ctx.sql, async (tx) => {
    const removed = await tx<CollectedRow[]>`
      with stale as (
        select name, instance_id from ${t.consumers}
        where instance_id <> '*'
          and coalesce(last_seen_at, created_at) < now() - make_interval(secs => ${olderThanMs / 1000})
        for update skip locked
      ), lowest as (
        select g.consumer_name, g.instance_id, min(g.from_id) as from_id
        from ${t.gaps} g join stale s on s.name = g.consumer_name and s.instance_id = g.instance_id
        group by g.consumer_name, g.instance_id
      )
      delete from ${t.consumers} c using stale
      where c.name = stale.name and c.instance_id = stale.instance_id
      returning c.name, c.instance_id, c.last_seen_at, c.cursor::text,
        (select l.from_id::text from lowest l where l.consumer_name = c.name and l.instance_id = c.instance_id)
          as lowest_pending_id,
        c.start_snapshot::text as start_snapshot, c.start_fence::text as start_fence,
        c.start_upto::text as start_upto, c.start_after::text as start_after`;
    for (const r of removed) {
      await tx`delete from ${t.turnStarts} where consumer_name = ${r.name} and instance_id = ${r.instance_id}`;
      await writeAudit(tx, t, {
        actor,
        action: 'collect-stale-instance',
        consumerName: r.name,
        instanceId: r.instance_id,
        cursorBefore: BigInt(r.cursor),
        cursorAfter: null,
        // What a live instance needs to resume where this row was (its dispatcher re-registers it,
        // see reregisterConsumer in @sluice/core): pending gaps from their lowest id, 'now' stragglers.
        details: {
          lastSeenAt: r.last_seen_at?.toISOString() ?? null,
          olderThanMs,
          lowestPendingId: r.lowest_pending_id,
          start:
            r.start_snapshot === null || r.start_fence === null || r.start_upto === null
              ? null
              : {
                  snapshot: r.start_snapshot,
                  fence: r.start_fence,
                  upto: r.start_upto,
                  after: r.start_after,
                },
        },
      });
    }
    return {
      removed: removed.map((r) => ({
        consumer: r.name,
        instanceId: r.instance_id,
        lastSeenAt: r.last_seen_at,
        cursor: BigInt(r.cursor),
      })),
    };
  });
}

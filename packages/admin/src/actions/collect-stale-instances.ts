import { InvalidOptionError, writeAudit } from '@sluice/core';
import type { AdminContext } from '../context.js';
import { checkText } from '../validate.js';

export interface StaleInstance {
  readonly consumer: string;
  readonly instanceId: string;
  readonly lastSeenAt: Date | null;
  readonly cursor: bigint;
}

/**
 * Deletes per-instance cursor rows (and their gaps) of instances not seen for `olderThanMs`
 * (DESIGN §4, per-instance). Rows locked by a running turn are left alone: that instance is alive.
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
  return ctx.sql.begin(async (tx) => {
    const removed = await tx<
      { name: string; instance_id: string; last_seen_at: Date | null; cursor: string }[]
    >`
      with stale as (
        select name, instance_id from ${t.consumers}
        where instance_id <> '*'
          and coalesce(last_seen_at, created_at) < now() - make_interval(secs => ${olderThanMs / 1000})
        for update skip locked
      )
      delete from ${t.consumers} c using stale
      where c.name = stale.name and c.instance_id = stale.instance_id
      returning c.name, c.instance_id, c.last_seen_at, c.cursor::text`;
    for (const r of removed) {
      await tx`delete from ${t.turnStarts} where consumer_name = ${r.name} and instance_id = ${r.instance_id}`;
      await writeAudit(tx, t, {
        actor,
        action: 'collect-stale-instance',
        consumerName: r.name,
        instanceId: r.instance_id,
        cursorBefore: BigInt(r.cursor),
        cursorAfter: null,
        details: { lastSeenAt: r.last_seen_at?.toISOString() ?? null, olderThanMs },
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

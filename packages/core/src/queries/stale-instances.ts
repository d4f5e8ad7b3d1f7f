import { guardedBegin } from '../connections/guarded-transaction.js';
import type { Tables } from '../schema/tables.js';
import type { Sql } from '../sql-types.js';
import { writeAudit } from './audit.js';
import { pgArray } from './pg-array.js';

/** A per-instance cursor row an operator collected. */
export interface CollectedInstance {
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
 * Deletes the per-instance cursor rows (their gaps and crash records with them) of instances not
 * seen for `olderThanMs`, and audits each with what a live instance needs to resume where its row
 * was (docs/design.md §4.9): an instance only cut off from the database re-registers it from that
 * (reregisterConsumer). Rows a running turn holds are left alone: that instance is alive.
 *
 * As everywhere (docs/guarantees.md, "the fence is drawn after the row is held"), what is recorded
 * is read once the rows are held: a lock that followed a turn's commit to the row version it wrote
 * would see, in its own statement, the gaps from before that commit.
 */
export async function collectStaleInstances(
  sql: Sql,
  t: Tables,
  olderThanMs: number,
  actor: string,
): Promise<CollectedInstance[]> {
  return guardedBegin(sql, async (tx) => {
    const held = await tx<{ name: string; instance_id: string }[]>`
      select name, instance_id from ${t.consumers}
      where left(instance_id, 1) <> '*'
        and coalesce(last_seen_at, created_at) < now() - make_interval(secs => ${olderThanMs / 1000})
      for update skip locked`;
    if (held.length === 0) return [];
    const names = pgArray(held.map((r) => r.name));
    const instances = pgArray(held.map((r) => r.instance_id));
    const removed = await tx<CollectedRow[]>`
      with held as (
        select * from unnest(${names}::text[], ${instances}::text[]) as h(name, instance_id)
      ), lowest as (
        select g.consumer_name, g.instance_id, min(g.from_id) as from_id
        from ${t.gaps} g join held h on h.name = g.consumer_name and h.instance_id = g.instance_id
        group by g.consumer_name, g.instance_id
      )
      delete from ${t.consumers} c using held
      where c.name = held.name and c.instance_id = held.instance_id
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
    return removed.map((r) => ({
      consumer: r.name,
      instanceId: r.instance_id,
      lastSeenAt: r.last_seen_at,
      cursor: BigInt(r.cursor),
    }));
  });
}

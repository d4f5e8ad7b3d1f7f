import type { EventRecord, JsonObject } from '../events.js';
import type { Tables } from '../schema/tables.js';
import type { TransactionSql } from '../sql-types.js';

export interface ReplayRow {
  deadLetterId: bigint;
  event: EventRecord;
}

interface Row {
  id: string;
  event_id: string;
  stream_id: string;
  type: string;
  data: JsonObject;
  metadata: JsonObject;
  event_created_at: Date;
}

/** Dead letters whose replay an operator requested, oldest first, rebuilt from their copies. */
export async function selectRequestedReplays(
  tx: TransactionSql,
  t: Tables,
  name: string,
  instanceId: string,
  limit: number,
): Promise<ReplayRow[]> {
  const rows = await tx<Row[]>`
    select d.id::text, d.event_id::text, d.stream_id, d.type, d.data, d.metadata, d.event_created_at
    from ${t.deadLetters} d
    where d.consumer_name = ${name} and d.instance_id = ${instanceId}
      and d.replay_requested_at is not null and d.replayed_at is null
    order by d.id limit ${limit}`;
  return rows.map((r) => ({
    deadLetterId: BigInt(r.id),
    event: {
      id: BigInt(r.event_id),
      streamId: r.stream_id,
      type: r.type,
      data: r.data,
      metadata: r.metadata,
      createdAt: r.event_created_at,
    },
  }));
}

/** Marks replays done, or failed (the request is cleared; an operator can ask again). */
export async function finishReplays(
  tx: TransactionSql,
  t: Tables,
  done: readonly bigint[],
  failed: { deadLetterId: bigint; error: string } | undefined,
): Promise<void> {
  if (done.length > 0) {
    await tx`
      update ${t.deadLetters} set replayed_at = now()
      where id = any(${`{${done.join(',')}}`}::int8[])`;
  }
  if (failed) {
    await tx`
      update ${t.deadLetters} set replay_requested_at = null, error = ${failed.error}, attempts = attempts + 1
      where id = ${failed.deadLetterId.toString()}::bigint`;
  }
}

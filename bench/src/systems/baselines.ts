import { pgArray } from '@sluice/core/internal';
import type postgres from 'postgres';

/** The events columns every reader fetches (what Sluice's fetch returns to its handlers). */
export interface EventRow {
  id: string;
  stream_id: string;
  type: string;
  /** The bench payload (harness/payload.ts), of which the readers use these fields. */
  data: { seq: number; orderId: string; totalCents: number };
  metadata: Record<string, unknown>;
  created_at: Date;
}

/** The minimal loop's cursor rows, at `cursor` (0: the beginning of the log). */
export async function registerCursors(
  sql: postgres.Sql,
  names: readonly string[],
  cursor: bigint = 0n,
): Promise<void> {
  await sql`
    insert into bench.cursors (name, cursor)
    select n, ${cursor.toString()}::bigint from unnest(${pgArray(names)}::text[]) n
    on conflict (name) do update set cursor = excluded.cursor`;
}

/**
 * What the minimal loop does with each event, inside its batch's transaction: a promise is awaited
 * before the next event (a write through `tx`, as a transactional handler's).
 */
export type MinimalHandle = (row: EventRow, tx: postgres.TransactionSql) => unknown;

/**
 * Minimal loop: the smallest correct consumer. One transaction per batch: lock the cursor row
 * (FOR UPDATE SKIP LOCKED), fetch the next `limit` events above it, handle them, move the cursor.
 * No gap tracking, no telemetry, no crash accounting. Returns the number of events handled, or
 * undefined when another worker holds the row.
 */
export function minimalBatch(
  sql: postgres.Sql,
  name: string,
  limit: number,
  handle: MinimalHandle,
): Promise<number | undefined> {
  return sql.begin<number | undefined>(async (tx) => {
    const [state] = await tx<{ cursor: string }[]>`
      select cursor from bench.cursors where name = ${name} for update skip locked`;
    if (!state) return undefined;
    const rows = await tx<EventRow[]>`
      select id, stream_id, type, data, metadata, created_at from sluice.events
      where id > ${state.cursor} order by id limit ${limit}`;
    for (const row of rows) {
      const handled = handle(row, tx);
      if (handled instanceof Promise) await handled;
    }
    const last = rows[rows.length - 1];
    if (last) await tx`update bench.cursors set cursor = ${last.id} where name = ${name}`;
    return rows.length;
  });
}

/** Each consumer loops on minimalBatch until a batch comes back short; all run at once on `sql`'s pool. */
export async function drainMinimal(
  sql: postgres.Sql,
  names: readonly string[],
  limit: number,
  handle: (consumer: number, row: EventRow, tx: postgres.TransactionSql) => unknown,
): Promise<void> {
  await Promise.all(
    names.map(async (name, index) => {
      for (;;) {
        const n = await minimalBatch(sql, name, limit, (row, tx) => handle(index, row, tx));
        if (n !== undefined && n < limit) return;
      }
    }),
  );
}

/** Raw scan: the read limit. Keyset pagination over the same table, autocommit, no cursor write. */
export async function drainRawScan(
  sql: postgres.Sql,
  consumers: number,
  limit: number,
  handle: (consumer: number, row: EventRow) => void,
): Promise<void> {
  await Promise.all(
    Array.from({ length: consumers }, async (_, index) => {
      let after = '0';
      for (;;) {
        const rows = await sql<EventRow[]>`
          select id, stream_id, type, data, metadata, created_at from sluice.events
          where id > ${after} order by id limit ${limit}`;
        for (const row of rows) handle(index, row);
        const last = rows[rows.length - 1];
        if (!last || rows.length < limit) return;
        after = last.id;
      }
    }),
  );
}

/**
 * The minimal loop woken by LISTEN (latency scenario): a notification or the 100 ms poll runs
 * batches until one comes back short; wake-ups during a run coalesce into one more run.
 */
export function minimalListener(
  sql: postgres.Sql,
  name: string,
  limit: number,
  pollIntervalMs: number,
  handle: (row: EventRow) => void,
) {
  let running = false;
  let again = false;
  let stopped = false;
  let inFlight: Promise<void> = Promise.resolve();
  // Read through a function: the flags change while the loop awaits.
  const repeat = () => again && !stopped;
  const kick = () => {
    if (stopped) return;
    if (running) {
      again = true;
      return;
    }
    running = true;
    inFlight = (async () => {
      try {
        do {
          again = false;
          for (;;) {
            const n = await minimalBatch(sql, name, limit, handle);
            if (n === undefined || n < limit) break;
          }
        } while (repeat());
      } catch (error) {
        process.stderr.write(`[minimal loop] ${(error as Error).message}\n`);
      } finally {
        running = false;
      }
    })();
  };
  const timer = setInterval(kick, pollIntervalMs);
  return {
    kick,
    async listen(channel: string) {
      await sql.listen(channel, kick);
    },
    async stop() {
      stopped = true;
      clearInterval(timer);
      await inFlight;
    },
  };
}

/**
 * The projection table of the catch-up case that writes one row per event: what a transactional
 * consumer keeps of an order, keyed by the event's id. Created empty in each run's database.
 */
export async function createProjection(sql: postgres.Sql): Promise<void> {
  await sql`
    create table bench.projection (
      event_id bigint primary key, order_id text not null, total_cents bigint not null)`;
}

/**
 * The one row an event writes, through the transaction it is handled in: the same statement for
 * Sluice's transactional handler (ctx.tx) and the minimal loop. Idempotent, as a handler must be
 * (a delivery may repeat).
 */
export function projectRow(
  tx: postgres.TransactionSql,
  id: string,
  data: { orderId: string; totalCents: number },
): Promise<unknown> {
  return tx`
    insert into bench.projection (event_id, order_id, total_cents)
    values (${id}::bigint, ${data.orderId}, ${data.totalCents})
    on conflict (event_id) do nothing`;
}

/** Rows in the projection table: one per event written. */
export async function projectedRows(sql: postgres.Sql): Promise<number> {
  const [row] = await sql<{ n: number }[]>`select count(*)::int as n from bench.projection`;
  return row?.n ?? 0;
}

// Regression test for docs/design.md §3.2: the appender's transaction id must exist before its
// event ids are drawn, for append() and for raw INSERTs alike. The test widens the window on
// purpose: it parks the inserting backend on an advisory lock right after the id default has been
// evaluated, and meanwhile another session reads pg_stat_activity.backend_xid.
//
// Where it parks matters. Column defaults are evaluated in column order (id, …, created_at, tx)
// before any row trigger fires, and the `tx` column's own default takes an xid; parking in a
// BEFORE ROW trigger would therefore see an xid even without the guarantee and prove nothing. So
// the park happens in the created_at default, which runs after the id is drawn and before the tx
// default. The control schema without the statement trigger shows the check does fail then.
import { useTestDatabase } from '@sluice/testing/vitest';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { append } from './append.js';
import { silentLogger } from './logger.js';
import { migrate } from './schema/migrate.js';
import type { Sql, TransactionSql } from './sql-types.js';

const db = await useTestDatabase();
const PARK_LOCK = 424242;

type Writer = (tx: TransactionSql, schema: string) => Promise<unknown>;
const writers: [string, Writer][] = [
  ['append()', (tx, schema) => append(tx, [{ streamId: 's-1', type: 'Parked', data: {} }], { schema })],
  [
    'a raw INSERT',
    (tx, schema) =>
      tx`insert into ${tx(`${schema}.events`)} (stream_id, type, data) values ('s-1', 'Parked', '{}')`,
  ],
];

async function installParking(schema: string): Promise<void> {
  await db.sql.unsafe(`
    create function "${schema}".parked_now() returns timestamptz volatile language plpgsql as $$
    begin
      perform pg_advisory_xact_lock_shared(${PARK_LOCK});
      return now();
    end $$;
    alter table "${schema}".events alter column created_at set default "${schema}".parked_now();`);
}

/** Runs `write` on its own connection and reports what another session saw while it was parked. */
async function observeParkedWriter(schema: string, write: Writer) {
  const writer = db.connect({ max: 1 });
  const holder = await db.sql.reserve();
  try {
    await holder`select pg_advisory_lock(${PARK_LOCK})`;
    // nextval() takes an xid when it WAL-logs the sequence (every 32nd value, and the first after a
    // checkpoint). Draw one here so the writer's nextval() is an ordinary one, as most are.
    await db.sql`select nextval(${`${schema}.events_id_seq`}::regclass)`;
    const [before] = await db.sql<{ last_value: string }[]>`
      select coalesce(last_value, 0)::text as last_value from pg_sequences
      where schemaname = ${schema} and sequencename = 'events_id_seq'`;
    let pid = 0;
    const writing = writer.begin(async (tx) => {
      const [row] = await tx<{ pid: number }[]>`select pg_backend_pid() as pid`;
      pid = row?.pid ?? 0;
      return write(tx, schema);
    });
    const parked = await waitUntilParked(db.sql, () => pid);
    const [during] = await db.sql<{ last_value: string }[]>`
      select coalesce(last_value, 0)::text as last_value from pg_sequences
      where schemaname = ${schema} and sequencename = 'events_id_seq'`;
    await holder`select pg_advisory_unlock(${PARK_LOCK})`;
    await writing;
    return {
      backendXid: parked.backend_xid,
      idDrawnWhileParked: BigInt(during!.last_value) > BigInt(before!.last_value),
    };
  } finally {
    holder.release();
    await writer.end();
  }
}

async function waitUntilParked(sql: Sql, pid: () => number) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const rows = await sql<{ backend_xid: string | null }[]>`
      select backend_xid::text from pg_stat_activity
      where pid = ${pid()} and wait_event_type = 'Lock' and wait_event = 'advisory'`;
    if (rows[0]) return rows[0];
    if (Date.now() > deadline) throw new Error('the writer never reached the parking trigger');
    await new Promise((resolve) => setImmediate(resolve));
  }
}

describe('xid before id (docs/design.md §3.2)', () => {
  beforeAll(async () => {
    await installParking('sluice');
    // The control: the same schema without the guarantee, to show the check can fail.
    await migrate(db.sql, { schema: 'unguarded', logger: silentLogger });
    await db.sql`drop trigger events_assign_xid on unguarded.events`;
    await installParking('unguarded');
  });
  afterAll(async () => {
    await db.sql`alter table sluice.events alter column created_at set default now()`;
  });

  test.each(writers)(
    '%s holds a transaction id by the time its event id has been drawn',
    async (_name, write) => {
      const seen = await observeParkedWriter('sluice', write);
      expect(seen.idDrawnWhileParked).toBe(true);
      expect(seen.backendXid).not.toBeNull();
    },
  );

  test.each(writers)(
    'control: without the trigger, %s draws its id before it has an xid',
    async (_name, write) => {
      const seen = await observeParkedWriter('unguarded', write);
      expect(seen.idDrawnWhileParked).toBe(true);
      expect(seen.backendXid).toBeNull();
    },
  );
});

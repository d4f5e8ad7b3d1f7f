// restart({ from: 'now' }) remembers the events still in flight at that moment, as a 'now'
// registration does, and delivers them once every transaction of that moment has ended: once the
// horizon has passed a fence. The fence must be an xid allocated after the snapshot that defines
// "in flight" (docs/guarantees.md). The restart's own xid is not one: its row lock drew it before
// that snapshot was taken, and a writer that began in between is in flight at the snapshot with an
// xid above it. The window is widened on purpose: the operator connects as a role subject to
// row-level security, and a policy parks the restart on the audit read it makes after its lock.
import { prune } from '@sluice/core';
import { appendEvents, freshSchema, recordingConsumer, until } from '@sluice/testing';
import { heldTransaction, testDispatcher, useLoginRole, useTestDatabase } from '@sluice/testing/vitest';
import { expect, test } from 'vitest';
import { createAdmin } from './create-admin.js';

const db = await useTestDatabase();
const PARK_LOCK = 773_001;
const operator = useLoginRole(db, 'sluice_operator');
const role = operator.name;

async function installParking(schema: string): Promise<void> {
  await operator.grant(schema);
  await db.sql.unsafe(`
    create function "${schema}".park_audit_read() returns boolean volatile language plpgsql as $$
    begin
      if current_user = '${role}' and current_query() ilike '%action = ''prune''%' then
        perform pg_advisory_xact_lock_shared(${PARK_LOCK});
      end if;
      return true;
    end $$;
    alter table "${schema}".audit enable row level security;
    create policy park on "${schema}".audit to "${role}"
      using ("${schema}".park_audit_read()) with check (true);`);
}

test("restart from 'now' delivers an event whose writer began after the restart's lock and committed later", async () => {
  const schema = await freshSchema(db.sql, 'rnow');
  await installParking(schema);
  const feed = recordingConsumer('feed');
  const dispatcher = testDispatcher(db.sql, schema, [feed.consumer]);
  await dispatcher.ensureRegistered();
  await appendEvents(db.sql, 2, undefined, schema);
  await dispatcher.runOnce();
  await prune(db.sql, { before: 1n, schema }); // an audited prune: the restart reads its floor
  const admin = createAdmin({ sql: operator.sql(), schema, lockTimeoutMs: 5_000 });

  const holder = await db.sql.reserve();
  await holder`select pg_advisory_lock(${PARK_LOCK})`;
  const writer = await heldTransaction(db.sql);
  let lateId = 0n;
  try {
    const restarting = admin.restart('feed', { from: 'now' });
    await until(async () => (await operator.parked()) > 0, 10_000, 'the restart to reach its audit read');
    // While the restart holds the row (and its xid) but has not read its snapshot yet: a writer
    // begins and holds an id, and a later id commits above it.
    await writer.xid();
    const [held] = await writer.append([{ streamId: 's', type: 'Late', data: {} }], { schema });
    lateId = held?.id ?? 0n;
    await appendEvents(db.sql, 1, undefined, schema);
    await holder`select pg_advisory_unlock(${PARK_LOCK})`;
    await restarting;
  } finally {
    await holder`select pg_advisory_unlock_all()`;
    holder.release();
  }

  // The horizon moves on while the writer is still open; passes must not give its event up.
  await db.sql`select pg_current_xact_id()`;
  await dispatcher.runOnce();
  await dispatcher.runOnce();
  await writer.commit();
  for (let i = 0; i < 4; i++) {
    await db.sql`select pg_current_xact_id()`;
    await dispatcher.runOnce();
  }
  expect(feed.ids()).toContain(lateId);
});

test("restart from 'now' on a pool of one connection draws its fence on that connection and returns", async () => {
  const schema = await freshSchema(db.sql, 'rnow1');
  const feed = recordingConsumer('feed');
  const dispatcher = testDispatcher(db.sql, schema, [feed.consumer]);
  await dispatcher.ensureRegistered();
  await appendEvents(db.sql, 2, undefined, schema);
  await dispatcher.runOnce();
  // An event in flight at the restart: the restart must fence it, with an xid drawn after its
  // snapshot. Drawn through a second connection of the operator's pool, it waited for ever here:
  // the pool's only connection holds the consumer row.
  const writer = await heldTransaction(db.sql);
  const [held] = await writer.append([{ streamId: 's', type: 'InFlight', data: {} }], { schema });
  await appendEvents(db.sql, 1, undefined, schema);
  const admin = createAdmin({ sql: db.connect({ max: 1 }), schema, lockTimeoutMs: 5_000 });
  const result = await Promise.race([
    admin.restart('feed', { from: 'now' }),
    new Promise<never>((_, reject) => {
      setTimeout(() => {
        reject(new Error('the restart did not return within 10 s'));
      }, 10_000).unref();
    }),
  ]);
  expect(result.cursorAfter).toBe(4n);

  await writer.commit();
  for (let i = 0; i < 3; i++) {
    await db.sql`select pg_current_xact_id()`;
    await dispatcher.runOnce();
  }
  expect(feed.ids()).toContain(held?.id);
});

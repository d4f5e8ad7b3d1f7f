// A takeover under what operators and deployments do meanwhile (docs/design.md §12.3): the live
// version enabled again while it is stopped, a rebuild with a dead or disabled row, a view other
// views are built on, its grants, a rollback of the deployment to the old version alone, and a
// consumer that started from now.
import { RebuildStateError, type Consumer } from '@sluice/core';
import { appendEvents, drainUntilIdle, freshSchema, holdGap, passUntil } from '@sluice/testing';
import { heldTransaction, testDispatcher, useTestDatabase } from '@sluice/testing/vitest';
import { expect, test } from 'vitest';
import { createAdmin } from './create-admin.js';

const db = await useTestDatabase();

/** A projection writing one row per event into `<schema>.proj_v<version>`, through ctx.tx. */
const projection = (schema: string, version: number, extra: Partial<Consumer> = {}): Consumer => ({
  name: 'stats',
  version,
  transactional: true,
  handler: async (event, ctx) => {
    if (!ctx.tx) throw new Error('a transactional handler has ctx.tx');
    await ctx.tx`insert into ${ctx.tx(`${schema}.proj_v${version}`)} (id) values (${event.id.toString()}::bigint)`;
  },
  ...extra,
});

async function setup(first: Partial<Consumer> = {}) {
  const schema = await freshSchema(db.sql, 'takeover');
  for (const v of [1, 2])
    await db.sql`create table ${db.sql(`${schema}.proj_v${v}`)} (id bigint primary key)`;
  const admin = createAdmin({ sql: db.sql, schema, lockTimeoutMs: 2_000, defaultActor: 'alice' });
  const one = testDispatcher(db.sql, schema, [projection(schema, 1, first)]);
  await one.ensureRegistered();
  await appendEvents(db.sql, 30, undefined, schema);
  await drainUntilIdle(one);
  await one.stop();
  return { schema, admin };
}

const ids = async (schema: string, relation: string): Promise<bigint[]> =>
  (
    await db.sql<
      { id: string }[]
    >`select r.id::text as id from ${db.sql(`${schema}.${relation}`)} r order by r.id`
  ).map((r) => BigInt(r.id));

const rows = (schema: string, name: string) =>
  db.sql<{ status: string; disabled_reason: string | null }[]>`
    select status, disabled_reason from ${db.sql(schema)}.consumers where name = ${name} order by instance_id`;

const barrierOf = async (schema: string): Promise<bigint> => {
  const [row] = await db.sql<{ barrier: string }[]>`
    select barrier::text as barrier from ${db.sql(schema)}.consumer_versions
    where consumer_name = 'stats' and version = 2`;
  return BigInt(row?.barrier ?? '-1');
};

test('a rebuild of a consumer that started from now replays the log from the beginning, not from the head', async () => {
  const { schema } = await setup({ startFrom: 'now' });
  const both = testDispatcher(db.sql, schema, [
    projection(schema, 1, { startFrom: 'now' }),
    projection(schema, 2, { startFrom: 'now' }),
  ]);
  await both.ensureRegistered();
  await appendEvents(db.sql, 5, undefined, schema);
  await drainUntilIdle(both);
  // Version 1 started at the head of an empty log; version 2 rebuilds all 35.
  expect(await ids(schema, 'proj_v2')).toEqual(await ids(schema, 'events'));
  await both.stop();
});

test('a live row enabled by an operator during the takeover stops again and raises the barrier: the new version holds everything the old one showed', async () => {
  const { schema, admin } = await setup();
  const both = testDispatcher(db.sql, schema, [projection(schema, 1), projection(schema, 2)]);
  await both.ensureRegistered();
  await drainUntilIdle(both);
  // A held id keeps version 2 short of the barrier.
  const held = await holdGap(db.sql, undefined, { schema });
  await appendEvents(db.sql, 3, undefined, schema);
  await both.runOnce();
  const started = await admin.approveRebuild('stats', { force: true });
  expect(started.state).toBe('taking-over');
  expect(await rows(schema, 'stats')).toEqual([
    { status: 'disabled', disabled_reason: 'version 2 takes over' },
  ]);

  // The operator enables version 1 again, and a process of a release from before versions (it
  // checks no takeover) delivers it past the barrier before any check.
  await admin.enable('stats', { reason: 'by mistake' });
  await appendEvents(db.sql, 4, undefined, schema);
  const unversionedStats: Consumer = { ...projection(schema, 1) };
  delete (unversionedStats as { version?: number }).version;
  const unversioned = testDispatcher(db.sql, schema, [unversionedStats]);
  await unversioned.ensureRegistered();
  await unversioned.runOnce();
  await unversioned.stop();
  const shown = await ids(schema, 'proj_v1');
  expect(shown.at(-1)).toBeGreaterThan(started.barrier ?? 0n);
  await held.release({ commit: true });
  await passUntil(
    both,
    async () =>
      (await admin.rebuildStatus('stats'))[0]?.versions.find((v) => v.version === 2)?.state === 'live',
    'version 2 is live',
  );
  const v1 = await ids(schema, 'proj_v1');
  const v2 = await ids(schema, 'proj_v2');
  expect(v1.length).toBeGreaterThanOrEqual(shown.length);
  expect(v1.filter((id) => !v2.includes(id))).toEqual([]);
  expect(await barrierOf(schema)).toBeGreaterThanOrEqual(v1.at(-1) ?? 0n);
  expect(await rows(schema, 'stats')).toEqual([
    { status: 'disabled', disabled_reason: 'retired: version 2 is live' },
  ]);
  await drainUntilIdle(both);
  expect(await ids(schema, 'proj_v2')).toEqual(await ids(schema, 'events'));
  await both.stop();
});

test('a rebuild with a disabled row is not taken over; an operator disable of the live version outlives an abandoned takeover', async () => {
  const { schema, admin } = await setup();
  const both = testDispatcher(db.sql, schema, [projection(schema, 1), projection(schema, 2)]);
  await both.ensureRegistered();
  await drainUntilIdle(both);
  await admin.disable('stats@v2', { reason: 'looking into it' });
  const refused = await admin.approveRebuild('stats', { force: true }).catch((e: unknown) => e);
  expect(refused).toBeInstanceOf(RebuildStateError);
  expect((refused as Error).message).toMatch(/disabled \(looking into it\)/);
  expect(await rows(schema, 'stats')).toEqual([{ status: 'idle', disabled_reason: null }]);
  await admin.enable('stats@v2');

  // The live version was disabled by an operator before the takeover: an abandon leaves it so.
  // (A held id below the barrier keeps the takeover from ending.)
  const held = await holdGap(db.sql, undefined, { schema });
  await appendEvents(db.sql, 2, undefined, schema);
  await both.runOnce();
  await admin.disable('stats', { reason: 'maintenance' });
  expect((await admin.approveRebuild('stats', { force: true })).state).toBe('taking-over');
  await admin.abandonRebuild('stats');
  expect(await rows(schema, 'stats')).toEqual([{ status: 'disabled', disabled_reason: 'maintenance' }]);
  await held.release({ commit: false });
  await both.stop();
});

test("a takeover is ended by a process that runs only the old version (the deployment rolled back), once the rebuild's rows are free", async () => {
  const { schema, admin } = await setup();
  const both = testDispatcher(db.sql, schema, [projection(schema, 1), projection(schema, 2)]);
  await both.ensureRegistered();
  await drainUntilIdle(both);
  await both.stop();
  // A turn of version 2 holds its row while the takeover begins: it cannot end then.
  const tx = await heldTransaction(db.sql);
  await tx.sql`select 1 from ${tx.sql(schema)}.consumers where name = 'stats@v2' for update`;
  expect((await admin.approveRebuild('stats')).state).toBe('taking-over');
  await tx.rollback();
  const oldOnly = testDispatcher(db.sql, schema, [projection(schema, 1)]);
  await oldOnly.ensureRegistered();
  await passUntil(
    oldOnly,
    async () =>
      (await admin.rebuildStatus('stats'))[0]?.versions.find((v) => v.version === 2)?.state === 'live',
    'version 2 is live',
  );
  await oldOnly.stop();
});

test('the live view keeps its owner and grants across the swap; a view other views are built on is refused before anything stops', async () => {
  const { schema, admin } = await setup();
  const reader = `${schema}_reader`;
  await db.sql`create role ${db.sql(reader)} nologin`;
  try {
    await db.sql`create view ${db.sql(`${schema}.stats`)} as select * from ${db.sql(`${schema}.proj_v1`)}`;
    await db.sql`grant select on ${db.sql(`${schema}.stats`)} to ${db.sql(reader)}`;
    await db.sql`create view ${db.sql(`${schema}.stats_report`)} as select count(*) from ${db.sql(`${schema}.stats`)}`;
    const view = (v: number) => ({ liveView: { view: `${schema}.stats`, source: `${schema}.proj_v${v}` } });
    const both = testDispatcher(db.sql, schema, [
      projection(schema, 1, view(1)),
      projection(schema, 2, view(2)),
    ]);
    await both.ensureRegistered();
    await drainUntilIdle(both);
    const refused = await admin.approveRebuild('stats').catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(RebuildStateError);
    expect((refused as Error).message).toMatch(
      /^.*rule _RETURN on view .*stats_report depends on its liveView/,
    );
    expect(await rows(schema, 'stats')).toEqual([{ status: 'idle', disabled_reason: null }]);

    await db.sql`drop view ${db.sql(`${schema}.stats_report`)}`;
    expect((await admin.approveRebuild('stats')).state).toBe('live');
    expect(await ids(schema, 'stats')).toEqual(await ids(schema, 'proj_v2'));
    const [grant] = await db.sql<{ granted: boolean }[]>`
      select has_table_privilege(${reader}, ${`${schema}.stats`}, 'select') as granted`;
    expect(grant?.granted).toBe(true);
    await both.stop();
  } finally {
    await db.sql`drop owned by ${db.sql(reader)}`;
    await db.sql`drop role ${db.sql(reader)}`;
  }
});

test("the swap keeps the view's column grants, options and comment: a reader has the same access after; a function or trigger on the view is refused before anything stops", async () => {
  const { schema, admin } = await setup();
  const reader = `${schema}_reader`;
  const view = `${schema}.stats`;
  await db.sql`create role ${db.sql(reader)} nologin`;
  try {
    await db.sql`create view ${db.sql(view)} with (security_invoker = yes, security_barrier = true)
                 as select * from ${db.sql(`${schema}.proj_v1`)}`;
    await db.sql`grant usage on schema ${db.sql(schema)} to ${db.sql(reader)}`;
    await db.sql`grant select (id) on ${db.sql(view)} to ${db.sql(reader)}`;
    await db.sql.unsafe(`comment on view ${view} is 'the stats, as the live version keeps them'`);
    const liveView = (v: number) => ({ liveView: { view, source: `${schema}.proj_v${v}` } });
    const both = testDispatcher(db.sql, schema, [
      projection(schema, 1, liveView(1)),
      projection(schema, 2, liveView(2)),
    ]);
    await both.ensureRegistered();
    await drainUntilIdle(both);

    // A SQL function whose body reads the view, and a trigger of the view: the drop would fail on
    // the first and take the second along.
    await db.sql.unsafe(`create function ${schema}.stats_count() returns bigint language sql
                         begin atomic select count(*) from ${view}; end`);
    const refused = await admin.approveRebuild('stats', { force: true }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(RebuildStateError);
    expect((refused as Error).message).toMatch(/function .*stats_count\(\) depends on its liveView/);
    await db.sql.unsafe(`drop function ${schema}.stats_count()`);
    // A function of the view's row type: the drop would fail on it too.
    await db.sql.unsafe(`create function ${schema}.stats_rows() returns setof ${view} language sql
                         as 'select * from ${view}'`);
    const ofRowType = await admin.approveRebuild('stats', { force: true }).catch((e: unknown) => e);
    expect((ofRowType as Error).message).toMatch(/function .*stats_rows\(\) depends on its liveView/);
    await db.sql.unsafe(`drop function ${schema}.stats_rows()`);
    await db.sql.unsafe(`
      create function ${schema}.refuse() returns trigger language plpgsql as $$ begin return null; end $$;
      create trigger no_writes instead of insert on ${view} for each row execute function ${schema}.refuse()`);
    const refusedAgain = await admin.approveRebuild('stats').catch((e: unknown) => e);
    expect((refusedAgain as Error).message).toMatch(/has a trigger no_writes, which the switch cannot carry/);
    expect(await rows(schema, 'stats')).toEqual([{ status: 'idle', disabled_reason: null }]);
    await db.sql.unsafe(`drop trigger no_writes on ${view}`);

    const access = async () => {
      const [row] = await db.sql<
        { options: string[]; comment: string | null; column: boolean; table: boolean }[]
      >`
        select c.reloptions as options, obj_description(c.oid, 'pg_class') as comment,
               has_column_privilege(${reader}, c.oid, 'id', 'select') as column,
               has_table_privilege(${reader}, c.oid, 'select') as table
        from pg_class c where c.oid = to_regclass(${view})`;
      return row;
    };
    const before = await access();
    expect(before).toEqual({
      options: ['security_invoker=yes', 'security_barrier=true'],
      comment: 'the stats, as the live version keeps them',
      column: true,
      table: false,
    });
    expect((await admin.approveRebuild('stats')).state).toBe('live');
    expect(await ids(schema, 'stats')).toEqual(await ids(schema, 'proj_v2'));
    expect(await access()).toEqual(before);
    // security_invoker kept: the reader, who may not read the version's table, still cannot.
    const denied = await db.sql
      .begin(async (tx) => {
        await tx`set local role ${tx(reader)}`;
        return tx`select id from ${tx(view)}`;
      })
      .catch((e: unknown) => e);
    expect((denied as { code?: string }).code).toBe('42501');
    await both.stop();
  } finally {
    await db.sql`drop owned by ${db.sql(reader)}`;
    await db.sql`drop role ${db.sql(reader)}`;
  }
});

test("dropping a retired version's source is refused, typed and changing nothing, while another table's foreign key needs it or a version not retired declares it", async () => {
  const { schema, admin } = await setup();
  const liveView = (v: number, source = v) => ({
    liveView: { view: `${schema}.stats`, source: `${schema}.proj_v${source}` },
  });
  const both = testDispatcher(db.sql, schema, [
    projection(schema, 1, liveView(1)),
    projection(schema, 2, liveView(2)),
  ]);
  await both.ensureRegistered();
  await drainUntilIdle(both);
  expect((await admin.approveRebuild('stats')).state).toBe('live');
  await both.stop();
  const versions = async () =>
    (await admin.rebuildStatus('stats'))[0]?.versions.map((v) => `${v.version}:${v.state}`);
  const source = `${schema}.proj_v1`;
  const exists = async () => (await db.sql`select to_regclass(${source}) as r`)[0]?.r !== null;

  await db.sql`create table ${db.sql(`${schema}.refs`)} (id bigint references ${db.sql(source)} (id))`;
  const byKey = await admin.dropVersion('stats', 1, { dropSource: true }).catch((e: unknown) => e);
  expect(byKey).toBeInstanceOf(RebuildStateError);
  expect((byKey as Error).message).toMatch(/constraint refs_id_fkey on table .*refs depends on its source/);
  expect(await versions()).toEqual(['1:retired', '2:live']);
  expect(await exists()).toBe(true);
  await db.sql`drop table ${db.sql(`${schema}.refs`)}`;

  // Blue and green: version 3 is rebuilt into version 1's table.
  await db.sql`create table ${db.sql(`${schema}.proj_v3`)} (id bigint primary key)`;
  const next = testDispatcher(db.sql, schema, [
    projection(schema, 2, liveView(2)),
    projection(schema, 3, liveView(3, 1)),
  ]);
  await next.ensureRegistered();
  const shared = await admin.dropVersion('stats', 1, { dropSource: true }).catch((e: unknown) => e);
  expect(shared).toBeInstanceOf(RebuildStateError);
  expect((shared as Error).message).toMatch(/version 3, which is not retired, declares the same source/);
  expect(await versions()).toEqual(['1:retired', '2:live', '3:rebuilding']);
  expect(await exists()).toBe(true);
  expect(await admin.dropVersion('stats', 1)).toMatchObject({ version: 1, dropped: null });
  expect(await exists()).toBe(true);
  await next.stop();
});

test('a takeover waits for an event the rebuild set aside under a parked key at or below the barrier, also a late one below its key’s first failure', async () => {
  const { schema, admin } = await setup();
  const both = testDispatcher(db.sql, schema, [projection(schema, 1), projection(schema, 2)]);
  await both.ensureRegistered();
  await drainUntilIdle(both);
  // As a turn of version 2 records them: a key parked by a failure above the barrier, and a late
  // event of that key, below the barrier, set aside after it.
  await db.sql`
    insert into ${db.sql(schema)}.parked_keys (consumer_name, key, first_event_id, error, attempts)
    values ('stats@v2', 'late', 1000, 'boom', 1)`;
  await db.sql`
    insert into ${db.sql(schema)}.parked_events (consumer_name, key, event_id, stream_id, type, data, metadata, event_created_at)
    values ('stats@v2', 'late', 5, 'late', 'T', '{}', '{}', now())`;
  expect((await admin.approveRebuild('stats', { force: true })).state).toBe('taking-over');
  await both.runOnce();
  const stateOf2 = async () =>
    (await admin.rebuildStatus('stats'))[0]?.versions.find((v) => v.version === 2)?.state;
  expect(await stateOf2()).toBe('taking-over'); // event 5 is still owed
  // Given up (an operator drops the key): nothing is owed below the barrier any more.
  await db.sql`delete from ${db.sql(schema)}.parked_keys where key = 'late'`;
  await passUntil(both, async () => (await stateOf2()) === 'live', 'the takeover to end');
  await both.stop();
});

// Versions of a consumer (docs/design.md §12): a new version of a projection is rebuilt beside the
// live one and takes over at a barrier, with nothing lost or doubled; a version with side effects
// takes the rows over where the old one is; readers see one version or the other, never half of one.
import {
  appendEvents,
  capturingLogger,
  drainUntilIdle,
  freshSchema,
  holdGap,
  passUntil,
  until,
} from '@sluice/testing';
import { testDispatcher, useTestDatabase } from '@sluice/testing/vitest';
import { describe, expect, test } from 'vitest';
import type { Consumer } from '../consumers/consumer.js';
import { RebuildNotReadyError, RebuildStateError } from '../errors.js';
import { liveVersion } from '../live-version.js';
import { prune } from '../retention/prune.js';
import { tables } from '../schema/tables.js';
import type { Sql } from '../sql-types.js';
import {
  beginTakeover,
  changeRebuild,
  dropVersion,
  rebuildProgress,
  refuseRetiredRows,
  selectVersions,
} from './versions.js';

const db = await useTestDatabase();
const byStream = (n: number) => ({ streamId: `s-${n % 5}`, type: 'Placed', data: { n } });

/** A projection writing one row per event into `<schema>.proj_v<version>`, through ctx.tx. */
function projection(schema: string, version: number, extra: Partial<Consumer> = {}): Consumer {
  return {
    name: 'stats',
    version,
    transactional: true,
    handler: async (event, ctx) => {
      if (!ctx.tx) throw new Error('a transactional handler has ctx.tx');
      await ctx.tx`insert into ${ctx.tx(`${schema}.proj_v${ctx.version ?? 0}`)} (id) values (${event.id.toString()}::bigint)`;
    },
    ...extra,
  };
}

async function setup(sql: Sql) {
  const schema = await freshSchema(sql, 'versions');
  for (const v of [1, 2]) await sql`create table ${sql(`${schema}.proj_v${v}`)} (id bigint primary key)`;
  return { schema, t: tables(sql, schema) };
}

async function projected(schema: string, version: number): Promise<bigint[]> {
  const rows = await db.sql<{ id: string }[]>`
    select p.id::text as id from ${db.sql(`${schema}.proj_v${version}`)} p order by p.id`;
  return rows.map((r) => BigInt(r.id));
}

async function committed(schema: string): Promise<bigint[]> {
  const rows = await db.sql<
    { id: string }[]
  >`select e.id::text as id from ${db.sql(schema)}.events e order by e.id`;
  return rows.map((r) => BigInt(r.id));
}

describe('a new version of a projection', () => {
  test('is rebuilt beside the live one, takes over once approved and caught up, and equals a projection of the whole log', async () => {
    const { schema, t } = await setup(db.sql);
    const one = testDispatcher(db.sql, schema, [projection(schema, 1)]);
    await one.ensureRegistered();
    await appendEvents(db.sql, 40, byStream, schema);
    await drainUntilIdle(one);
    await one.stop();

    // The next deployment runs both versions: version 2 rebuilds from the beginning.
    const both = testDispatcher(db.sql, schema, [projection(schema, 1), projection(schema, 2)]);
    await both.ensureRegistered();
    expect((await selectVersions(db.sql, t, ['stats'])).map((v) => [v.version, v.state, v.rowName])).toEqual([
      [1, 'live', 'stats'],
      [2, 'rebuilding', 'stats@v2'],
    ]);
    // Writers go on meanwhile, one of them rolling back, one holding an id open.
    await db.sql
      .begin(async (tx) => {
        await tx`insert into ${tx(schema)}.events (stream_id, type, data) values ('gone', 'X', '{}')`;
        throw new Error('rolled back');
      })
      .catch(() => undefined);
    const held = await holdGap(db.sql, { streamId: 's-held', type: 'Late', data: {} }, { schema });
    await appendEvents(db.sql, 20, (n) => byStream(n + 40), schema);
    // (A held id is a pending gap of both versions: passes, not drainUntilIdle.)
    await passUntil(
      both,
      async () => (await rebuildProgress(db.sql, t, 'stats'))[0]?.lagEvents === 0n,
      'version 2 caught up',
    );
    expect(await liveVersion(db.sql, 'stats', { schema })).toBe(1);
    const [progress] = await rebuildProgress(db.sql, t, 'stats');
    expect(progress).toMatchObject({ version: 2, state: 'rebuilding', liveVersion: 1, lagEvents: 0n });

    // Approved: version 1 stops at the barrier; version 2 cannot take over with a gap below it.
    const started = await beginTakeover(db.sql, t, schema, 'stats', {
      actor: 'alice',
      within: 1_000n,
      lockTimeoutMs: 5_000,
    });
    expect(started.state).toBe('taking-over');
    await appendEvents(db.sql, 5, (n) => byStream(n + 60), schema);
    for (let pass = 0; pass < 3; pass++) await both.runOnce();
    expect(await liveVersion(db.sql, 'stats', { schema })).toBe(1);
    await held.release({ commit: true });
    await passUntil(
      both,
      async () => (await liveVersion(db.sql, 'stats', { schema })) === 2,
      'version 2 is live',
    );
    await drainUntilIdle(both);

    const all = await committed(schema);
    expect(await projected(schema, 2)).toEqual(all);
    // Version 1 stopped at the barrier: it has every event up to it, and nothing after.
    const v1 = await projected(schema, 1);
    expect(v1).toEqual(all.filter((id) => id <= (started.barrier ?? 0n) && id !== held.id));
    const [row] = await db.sql<{ status: string; disabled_reason: string }[]>`
      select status, disabled_reason from ${db.sql(schema)}.consumers where name = 'stats'`;
    expect(row).toEqual({ status: 'disabled', disabled_reason: 'retired: version 2 is live' });
    const audit = await db.sql<{ action: string }[]>`
      select action from ${db.sql(schema)}.audit where consumer_name = 'stats' order by id`;
    expect(audit.map((a) => a.action)).toEqual(['rebuild-started', 'rebuild-takeover', 'version-live']);

    // Its data goes only when an operator drops it.
    const dropped = await dropVersion(db.sql, t, 'stats', 1, {
      actor: 'alice',
      dropSource: false,
      lockTimeoutMs: 5_000,
    });
    expect(dropped).toMatchObject({ version: 1, rows: 1 });
    expect(await db.sql`select 1 from ${db.sql(schema)}.consumers where name = 'stats'`).toHaveLength(0);
    expect(await projected(schema, 1)).toEqual(v1); // its table is the application's: kept
  });

  test('takes over by itself within its distance of the head, and switches the live view in the same transaction', async () => {
    const { schema, t } = await setup(db.sql);
    await db.sql`create view ${db.sql(`${schema}.stats`)} as select * from ${db.sql(`${schema}.proj_v1`)}`;
    const view = (v: number) => ({ view: `${schema}.stats`, source: `${schema}.proj_v${v}` });
    const one = testDispatcher(db.sql, schema, [projection(schema, 1, { liveView: view(1) })]);
    await one.ensureRegistered();
    await appendEvents(db.sql, 30, byStream, schema);
    await drainUntilIdle(one);
    await one.stop();

    const auto = { liveView: view(2), rebuild: { takeover: { withinEvents: 5 } } };
    const both = testDispatcher(db.sql, schema, [
      projection(schema, 1, { liveView: view(1) }),
      projection(schema, 2, auto),
    ]);
    await both.ensureRegistered();
    await passUntil(
      both,
      async () => (await liveVersion(db.sql, 'stats', { schema })) === 2,
      'version 2 is live',
    );
    await drainUntilIdle(both);
    const through = await db.sql<{ id: string }[]>`
      select s.id::text as id from ${db.sql(`${schema}.stats`)} s order by s.id`;
    expect(through.map((r) => BigInt(r.id))).toEqual(await committed(schema));
    expect((await selectVersions(db.sql, t, ['stats'])).map((v) => v.state)).toEqual(['retired', 'live']);
    // The retired version's row, stopped where it was, never runs again: it holds no event back.
    await appendEvents(db.sql, 5, (n) => byStream(n + 100), schema);
    await drainUntilIdle(both);
    const head = (await committed(schema)).at(-1) ?? 0n;
    expect(await prune(db.sql, { before: head, schema })).toEqual({ deleted: Number(head) - 1 });
  });

  test('readers that read the live version and its table in one transaction never see a version half built', async () => {
    const { schema, t } = await setup(db.sql);
    const both = testDispatcher(db.sql, schema, [
      projection(schema, 1),
      projection(schema, 2, { rebuild: { takeover: { withinEvents: 0 } } }),
    ]);
    await both.ensureRegistered();
    const reading = { on: true };
    const seen: { version: number; count: number; head: number }[] = [];
    const reader = (async () => {
      while (reading.on) {
        await db.sql.begin('isolation level repeatable read', async (tx) => {
          const version = (await liveVersion(tx, 'stats', { schema })) ?? 0;
          const [row] = await tx<
            { count: number }[]
          >`select count(*)::int as count from ${tx(`${schema}.proj_v${version}`)}`;
          seen.push({ version, count: row?.count ?? 0, head: 0 });
        });
      }
    })();
    for (let round = 0; round < 6; round++) {
      await appendEvents(db.sql, 20, (n) => byStream(n + round * 20), schema);
      await both.runOnce();
    }
    await passUntil(
      both,
      async () => (await liveVersion(db.sql, 'stats', { schema })) === 2,
      'version 2 is live',
    );
    await until(() => seen.some((s) => s.version === 2), 10_000, 'a reader saw version 2 live');
    reading.on = false;
    await reader;
    // What a reader sees never goes back: the new version is live only once it holds at least what
    // the old one showed.
    for (let i = 1; i < seen.length; i++) {
      expect(
        seen[i]?.count ?? 0,
        `read ${i}: ${JSON.stringify(seen[i - 1])} then ${JSON.stringify(seen[i])}`,
      ).toBeGreaterThanOrEqual(seen[i - 1]?.count ?? 0);
    }
    expect(new Set(seen.map((s) => s.version))).toEqual(new Set([1, 2]));
    expect(await rebuildProgress(db.sql, t, 'stats')).toEqual([]);
  });

  test('an approval far from the head is refused unless forced; a paused rebuild is not approved; abandoned, it is not run again', async () => {
    const { schema, t } = await setup(db.sql);
    await appendEvents(db.sql, 50, byStream, schema);
    const one = testDispatcher(db.sql, schema, [projection(schema, 1)]);
    await one.ensureRegistered();
    await drainUntilIdle(one);
    await one.stop();
    const both = testDispatcher(db.sql, schema, [
      projection(schema, 1),
      projection(schema, 2, { batchSize: 10, maxBatchSize: 10 }),
    ]);
    await both.ensureRegistered();
    await expect(
      beginTakeover(db.sql, t, schema, 'stats', { actor: 'alice', within: 5n, lockTimeoutMs: 5_000 }),
    ).rejects.toBeInstanceOf(RebuildNotReadyError);
    expect((await selectVersions(db.sql, t, ['stats']))[1]?.state).toBe('rebuilding');

    await changeRebuild(db.sql, t, 'stats', 'pause', { actor: 'alice', lockTimeoutMs: 5_000 });
    await drainUntilIdle(both);
    expect(await projected(schema, 2)).toEqual([]);
    await expect(
      beginTakeover(db.sql, t, schema, 'stats', { actor: 'alice', within: null, lockTimeoutMs: 5_000 }),
    ).rejects.toBeInstanceOf(RebuildStateError);
    await changeRebuild(db.sql, t, 'stats', 'resume', { actor: 'alice', lockTimeoutMs: 5_000 });
    await both.runOnce();
    expect((await projected(schema, 2)).length).toBeGreaterThan(0);

    const abandoned = await changeRebuild(db.sql, t, 'stats', 'abandon', {
      actor: 'alice',
      reason: 'wrong shape',
      lockTimeoutMs: 5_000,
    });
    expect(abandoned.state).toBe('abandoned');
    await appendEvents(db.sql, 5, byStream, schema);
    await drainUntilIdle(both);
    expect(await db.sql`select 1 from ${db.sql(schema)}.consumers where name = 'stats@v2'`).toHaveLength(0);
    // A restart with the same declarations does not bring it back.
    const again = testDispatcher(db.sql, schema, [projection(schema, 1), projection(schema, 2)]);
    await again.ensureRegistered();
    await drainUntilIdle(again);
    expect(await db.sql`select 1 from ${db.sql(schema)}.consumers where name = 'stats@v2'`).toHaveLength(0);
    expect(await projected(schema, 1)).toEqual(await committed(schema));
  });
});

describe('a new version of a consumer with side effects', () => {
  test.each([1, 3])(
    'is never rebuilt: it takes the rows over where the old version is, and every effect happens once (%i lanes)',
    async (lanes) => {
      const { schema, t } = await setup(db.sql);
      const sent: { id: bigint; version: number | undefined }[] = [];
      const mailer = (version: number, extra: Partial<Consumer> = {}): Consumer => ({
        name: 'mailer',
        version,
        sideEffects: true,
        lanes,
        handler: (event, ctx) => {
          sent.push({ id: event.id, version: ctx.version });
        },
        ...extra,
      });
      const one = testDispatcher(db.sql, schema, [mailer(1)]);
      await one.ensureRegistered();
      await appendEvents(db.sql, 20, byStream, schema);
      await drainUntilIdle(one);
      await one.stop();

      const both = testDispatcher(db.sql, schema, [mailer(1), mailer(2)]);
      await both.ensureRegistered();
      expect(
        (await selectVersions(db.sql, t, ['mailer'])).map((v) => [v.version, v.state, v.rowName]),
      ).toEqual([
        [1, 'live', 'mailer'],
        [2, 'waiting', 'mailer'],
      ]);
      await appendEvents(db.sql, 10, (n) => byStream(n + 20), schema);
      await drainUntilIdle(both);
      expect(sent.every((s) => s.version === 1)).toBe(true);
      const taken = await beginTakeover(db.sql, t, schema, 'mailer', {
        actor: 'alice',
        within: null,
        lockTimeoutMs: 5_000,
      });
      expect(taken).toMatchObject({ version: 2, state: 'live', barrier: 30n });
      // A process still on version 1 alone no longer turns the rows.
      const old = testDispatcher(db.sql, schema, [mailer(1)]);
      await old.ensureRegistered();
      await appendEvents(db.sql, 10, (n) => byStream(n + 30), schema);
      expect((await old.runOnce()).processed).toBe(0);
      // The rows are version 2's now, live: version 1, retired, has the same row name, but its
      // retirement neither lets prune past them nor refuses an operator's action on them.
      await expect(prune(db.sql, { before: 41n, schema })).rejects.toMatchObject({
        code: 'SLUICE_PRUNE_BLOCKED',
      });
      await expect(refuseRetiredRows(db.sql, t, 'mailer')).resolves.toBeUndefined();
      await drainUntilIdle(both);
      // Lanes keep order per stream, not across streams: the ids are compared as sets.
      const ids = (list: readonly bigint[]) => [...list].sort((a, b) => (a < b ? -1 : 1));
      expect(ids(sent.map((s) => s.id))).toEqual(await committed(schema));
      expect(ids(sent.filter((s) => s.version === 2).map((s) => s.id))).toEqual(
        (await committed(schema)).filter((id) => id > 30n),
      );
    },
  );
});

describe('a declared version that cannot run', () => {
  /** A consumer `notifier` whose versions 1 and 2 have no side effects: version 2 is rebuilt, on rows `notifier@v2`. */
  async function rebuiltVersionLive(seen: { id: bigint; version: number | undefined }[]) {
    const { schema, t } = await setup(db.sql);
    const notifier = (version: number, extra: Partial<Consumer> = {}): Consumer => ({
      name: 'notifier',
      version,
      handler: (event, ctx) => {
        seen.push({ id: event.id, version: ctx.version });
      },
      ...extra,
    });
    const both = testDispatcher(db.sql, schema, [
      notifier(1),
      notifier(2, { rebuild: { takeover: { withinEvents: 1_000 } } }),
    ]);
    await both.ensureRegistered();
    await appendEvents(db.sql, 20, byStream, schema);
    await passUntil(
      both,
      async () => (await liveVersion(db.sql, 'notifier', { schema })) === 2,
      'version 2 is live',
    );
    await drainUntilIdle(both);
    await both.stop();
    return { schema, t, notifier };
  }

  /** What registration leaves behind: versions, rows and audit entries. */
  async function recorded(schema: string, t: ReturnType<typeof tables>) {
    return {
      versions: (await selectVersions(db.sql, t, ['notifier'])).map((v) => [v.version, v.state, v.rowName]),
      rows: await db.sql`
        select name, instance_id, cursor::text as cursor, status, version from ${db.sql(schema)}.consumers
        order by name, instance_id`,
      audit: await db.sql`select count(*)::int as n from ${db.sql(schema)}.audit`,
    };
  }

  test('with side effects, after a rebuilt version took over: start() refuses it, naming what to do, and changes nothing', async () => {
    const seen: { id: bigint; version: number | undefined }[] = [];
    const { schema, t, notifier } = await rebuiltVersionLive(seen);
    const before = await recorded(schema, t);
    expect(before.versions).toEqual([
      [1, 'retired', 'notifier'],
      [2, 'live', 'notifier@v2'],
    ]);

    // The next release declares only its new version, now with side effects: it cannot take over
    // rows of the live version's (they are not the consumer's own), so it is refused, not left
    // registered nowhere while the consumer stops for good.
    const third = testDispatcher(db.sql, schema, [
      notifier(3, { sideEffects: true, rebuild: { takeover: { withinEvents: 1_000 } } }),
    ]);
    const refused = await third.start().then(
      () => null,
      (error: unknown) => error,
    );
    expect(refused).toMatchObject({ code: 'SLUICE_INVALID_OPTION', option: 'consumers[0].sideEffects' });
    expect((refused as Error).message).toMatch(/"notifier@v2".*Declare version 3 without sideEffects/);
    expect(await recorded(schema, t)).toEqual(before);

    // Declared with version 2 beside it, it is refused just the same: version 2 is not stopped
    // silently by a start that half-registered.
    const again = testDispatcher(db.sql, schema, [notifier(2), notifier(3, { sideEffects: true })]);
    await expect(again.ensureRegistered()).rejects.toMatchObject({ code: 'SLUICE_INVALID_OPTION' });
    expect(await recorded(schema, t)).toEqual(before);

    // Version 2 still serves the consumer.
    const serving = testDispatcher(db.sql, schema, [notifier(2)]);
    await serving.ensureRegistered();
    await appendEvents(db.sql, 5, (n) => byStream(n + 20), schema);
    await drainUntilIdle(serving);
    expect(seen.filter((s) => s.version === 2 && s.id > 20n).map((s) => s.id)).toEqual(
      (await committed(schema)).filter((id) => id > 20n),
    );
  });

  test('with side effects and another laneKey than the lanes it would take over: start() refuses it, and the live version goes on', async () => {
    const { schema } = await setup(db.sql);
    const seen: string[] = [];
    const mailer = (version: number, extra: Partial<Consumer> = {}): Consumer => ({
      name: 'mailer',
      version,
      sideEffects: true,
      lanes: 2,
      handler: (event) => {
        seen.push(`v${version}:${event.id}`);
      },
      ...extra,
    });
    const live = testDispatcher(db.sql, schema, [mailer(1)]);
    await live.ensureRegistered();
    await appendEvents(db.sql, 4, byStream, schema);
    await drainUntilIdle(live);
    const before =
      await db.sql`select version, state from ${db.sql(schema)}.consumer_versions order by version`;

    const otherKey = testDispatcher(db.sql, schema, [mailer(2, { laneKey: { data: 'n' } })]);
    const refused = await otherKey.start().then(
      () => null,
      (error: unknown) => error,
    );
    expect(refused).toMatchObject({ code: 'SLUICE_INVALID_OPTION', option: 'consumers[0].laneKey' });
    expect(
      await db.sql`select version, state from ${db.sql(schema)}.consumer_versions order by version`,
    ).toEqual(before);
    await appendEvents(db.sql, 2, (n) => byStream(n + 4), schema);
    await drainUntilIdle(live);
    expect(seen.filter((s) => s.startsWith('v1:')).length).toBe(6);
  });

  test('rebuilt from above the log head: start() refuses it, as a restart there is (its takeover would skip the events to come), and changes nothing', async () => {
    const { schema, t } = await setup(db.sql);
    const seen: bigint[] = [];
    const notifier = (version: number, extra: Partial<Consumer> = {}): Consumer => ({
      name: 'notifier',
      version,
      handler: (event) => {
        seen.push(event.id);
      },
      ...extra,
    });
    const first = testDispatcher(db.sql, schema, [notifier(1)]);
    await first.ensureRegistered();
    await appendEvents(db.sql, 5, byStream, schema);
    await drainUntilIdle(first);
    await first.stop();
    const before = await recorded(schema, t);

    const ahead = testDispatcher(db.sql, schema, [
      notifier(1),
      notifier(2, { rebuild: { from: 1000, takeover: { withinEvents: 0 } } }),
    ]);
    const refused = await ahead.start().then(
      () => null,
      (error: unknown) => error,
    );
    expect(refused).toMatchObject({ code: 'SLUICE_BEYOND_HEAD', head: 5n });
    expect((refused as Error).message).toMatch(/version 2 of "notifier".*rebuild\.from.*5 or lower/);
    expect(await recorded(schema, t)).toEqual(before);

    // At the head it is taken: it starts caught up, and takes over with nothing skipped.
    const atHead = testDispatcher(db.sql, schema, [
      notifier(1),
      notifier(2, { rebuild: { from: 5, takeover: { withinEvents: 0 } } }),
    ]);
    await atHead.ensureRegistered();
    await passUntil(
      atHead,
      async () => (await liveVersion(db.sql, 'notifier', { schema })) === 2,
      'version 2 is live',
    );
    seen.length = 0;
    await appendEvents(db.sql, 3, (n) => byStream(n + 5), schema);
    await drainUntilIdle(atHead);
    expect(seen).toEqual([6n, 7n, 8n]);
  });

  test('below a newer version on its way, never registered itself: the process does not run it, and says so', async () => {
    const { schema, t } = await setup(db.sql);
    const notifier = (version: number): Consumer => ({ name: 'notifier', version, handler: () => {} });
    // Release 3 skipped version 2: version 3 is rebuilt beside version 1.
    const current = testDispatcher(db.sql, schema, [notifier(1), notifier(3)]);
    await current.ensureRegistered();
    // A process of a release that declared version 2 starts late, during the rolling deployment.
    const logger = capturingLogger();
    const late = testDispatcher(db.sql, schema, [notifier(2)], { logger });
    await late.ensureRegistered();
    expect((await selectVersions(db.sql, t, ['notifier'])).map((v) => [v.version, v.state])).toEqual([
      [1, 'live'],
      [3, 'rebuilding'],
    ]);
    expect(await late.runOnce()).toMatchObject({ processed: 0 });
    const warning = logger.lines.find((l) => l.level === 'warn' && l.fields['consumer'] === 'notifier');
    expect(warning?.fields).toMatchObject({ version: 2, newest: 3 });
  });
});

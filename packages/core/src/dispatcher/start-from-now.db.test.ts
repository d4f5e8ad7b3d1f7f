// startFrom: 'now' (docs/guarantees.md): a consumer registered while writers are mid-transaction
// skips history but must receive the events those writers commit later ("stragglers"). Delivering
// them keeps every promise a normal turn keeps: each ctx.tx write applied once, a crash counted
// towards maxAttempts, and a turn bounded by its batch and by maxTurnMs.
import { appendEvents, consumerRow, freshSchema, recordingConsumer, until } from '@sluice/testing';
import { heldTransaction, useTestDatabase } from '@sluice/testing/vitest';
import { expect, test } from 'vitest';
import type { HandlerContext } from '../consumers/consumer.js';
import type { EventRecord } from '../events.js';
import type { Sql } from '../sql-types.js';
import { testDispatcher } from '../test-support.js';

const db = await useTestDatabase();

/**
 * History, then `count` events appended by a transaction still open when the consumer registers,
 * with a later event committed above them (so they lie at or below the head it starts from).
 */
async function withStragglers(schema: string, count: number) {
  await appendEvents(db.sql, 2, undefined, schema); // history: never delivered
  const writer = await heldTransaction(db.sql);
  const stragglers = await writer.append(
    Array.from({ length: count }, (_, n) => ({ streamId: `s-${n}`, type: 'InFlight', data: { n } })),
    { schema },
  );
  await appendEvents(db.sql, 1, undefined, schema); // committed above them: history too
  return { writer, ids: stragglers.map((e) => e.id) };
}

async function runUntilQuiet(dispatcher: { runOnce(): Promise<{ processed: number }> }, passes = 20) {
  for (let i = 0; i < passes; i++) await dispatcher.runOnce();
}

test("a transactional 'now' consumer applies each straggler's write once when a later straggler fails", async () => {
  const schema = await freshSchema(db.sql);
  await db.sql`create table ${db.sql(`${schema}.applied`)} (event_id bigint not null)`;
  const { writer, ids } = await withStragglers(schema, 3);
  const failOnce = new Set([ids[1]]);
  const c = recordingConsumer('projection', {
    startFrom: 'now',
    transactional: true,
    handler: async (event: EventRecord, ctx: HandlerContext) => {
      await (ctx.tx as unknown as Sql)`insert into ${db.sql(`${schema}.applied`)} values (${event.id.toString()}::bigint)`;
      if (failOnce.delete(event.id)) throw new Error(`fails once on ${event.id}`);
    },
  });
  const dispatcher = testDispatcher(db.sql, schema, [c.consumer]);
  await dispatcher.ensureRegistered();
  await writer.commit();
  await runUntilQuiet(dispatcher);

  const applied = await db.sql<{ event_id: string; n: number }[]>`
    select a.event_id::text as event_id, count(*)::int as n from ${db.sql(`${schema}.applied`)} a
    group by a.event_id order by a.event_id`;
  expect(applied).toEqual(ids.map((id) => ({ event_id: id.toString(), n: 1 })));
  expect(await consumerRow(db.sql, schema, 'projection')).toMatchObject({ attempts: 0, status: 'idle' });
});

test("a straggler's delivery is recorded as a turn start first, so a crash on it counts", async () => {
  const schema = await freshSchema(db.sql);
  const { writer, ids } = await withStragglers(schema, 1);
  const startsSeen: (number | undefined)[] = [];
  const c = recordingConsumer('mailer', {
    startFrom: 'now',
    handler: async () => {
      const [row] = await db.sql<{ started_count: number }[]>`
        select started_count from ${db.sql(`${schema}.turn_starts`)} where consumer_name = 'mailer'`;
      startsSeen.push(row?.started_count);
    },
  });
  const dispatcher = testDispatcher(db.sql, schema, [c.consumer]);
  await dispatcher.ensureRegistered();
  await writer.commit();
  await runUntilQuiet(dispatcher, 3);
  expect(startsSeen).toEqual([1]); // committed before the handler ran

  // What a process that died in that handler leaves behind, maxAttempts times: the consumer is
  // dead on the straggler without calling the handler again.
  const again = await freshSchema(db.sql);
  const second = await withStragglers(again, 1);
  let calls = 0;
  const poison = recordingConsumer('mailer', {
    startFrom: 'now',
    errorPolicy: { maxAttempts: 3 },
    handler: () => {
      calls += 1;
    },
  });
  const d2 = testDispatcher(db.sql, again, [poison.consumer], { rearmCooldownMs: 3_600_000 });
  await d2.ensureRegistered();
  await second.writer.commit();
  const straggler = second.ids[0] as bigint;
  await db.sql`
    insert into ${db.sql(`${again}.turn_starts`)} (consumer_name, instance_id, first_event_id, last_event_id, started_count)
    values ('mailer', '*', ${straggler.toString()}::bigint, ${straggler.toString()}::bigint, 3)`;
  await runUntilQuiet(d2, 3);
  expect(calls).toBe(0);
  expect(await consumerRow(db.sql, again, 'mailer')).toMatchObject({
    status: 'dead',
    attempts: 3,
    stuckEventId: straggler,
  });
  expect(ids).toHaveLength(1);
});

test("a 'now' consumer's stragglers are delivered in turns bounded by the batch size", async () => {
  const schema = await freshSchema(db.sql);
  const { writer, ids } = await withStragglers(schema, 250);
  const perTurn: number[] = [];
  let inTurn = 0;
  const c = recordingConsumer('indexer', {
    startFrom: 'now',
    batchSize: 100,
    maxBatchSize: 100,
    handler: () => {
      inTurn += 1;
    },
  });
  const dispatcher = testDispatcher(db.sql, schema, [c.consumer]);
  await dispatcher.ensureRegistered();
  await writer.commit();
  for (let i = 0; i < 6; i++) {
    inTurn = 0;
    await dispatcher.runOnce();
    perTurn.push(inTurn);
  }
  expect(Math.max(...perTurn)).toBeLessThanOrEqual(100);
  expect(perTurn.reduce((a, b) => a + b, 0)).toBe(ids.length);
});

test("a 'now' consumer's straggler turn ends at maxTurnMs and the next turn continues", async () => {
  const schema = await freshSchema(db.sql);
  const { writer, ids } = await withStragglers(schema, 20);
  const delivered: bigint[] = [];
  const c = recordingConsumer('slow', {
    startFrom: 'now',
    handler: async (event: EventRecord) => {
      delivered.push(event.id);
      await new Promise((resolve) => setTimeout(resolve, 25)); // a slow handler, not a race window
    },
  });
  const dispatcher = testDispatcher(db.sql, schema, [c.consumer], { maxTurnMs: 40 });
  await dispatcher.ensureRegistered();
  await writer.commit();
  await dispatcher.runOnce();
  expect(delivered.length).toBeGreaterThan(0);
  expect(delivered.length).toBeLessThan(ids.length);
  await runUntilQuiet(dispatcher, 30);
  expect(delivered).toEqual(ids);
});

test("a 'now' registration whose transaction drew its xid before its snapshot (a version recorded first) still waits for the writers in flight", async () => {
  const schema = await freshSchema(db.sql);
  await appendEvents(db.sql, 1, undefined, schema); // history
  // The registration records the declared version first (its transaction draws its xid there),
  // then parks on an advisory lock the test holds: a writer begins in that window.
  await db.sql.unsafe(`
    create function ${schema}.park() returns trigger language plpgsql as $$
      begin perform pg_advisory_xact_lock(hashtext('${schema}')); return null; end $$;
    create trigger park after insert or update on ${schema}.consumer_versions
      for each row execute function ${schema}.park()`);
  const parking = await heldTransaction(db.sql);
  await parking.sql`select pg_advisory_xact_lock(hashtext(${schema}))`;
  const feed = recordingConsumer('feed', { startFrom: 'now' });
  const dispatcher = testDispatcher(db.sql, schema, [
    recordingConsumer('projection', { version: 1 }).consumer,
    feed.consumer,
  ]);
  const registering = dispatcher.ensureRegistered();
  await until(
    async () =>
      (
        await db.sql`select 1 from pg_locks where locktype = 'advisory' and not granted and objid = hashtext(${schema})::oid`
      ).length > 0,
    10_000,
    'the registration to park on the advisory lock',
  );
  const writer = await heldTransaction(db.sql);
  const [straggler] = await writer.append([{ streamId: 'w', type: 'InFlight', data: {} }], { schema });
  await appendEvents(db.sql, 1, undefined, schema); // committed above it: the head it starts from
  await parking.commit();
  await registering;
  await runUntilQuiet(dispatcher, 3); // turns while the writer is still open
  expect(feed.ids()).toEqual([]);
  await writer.commit();
  await runUntilQuiet(dispatcher, 3);
  expect(feed.ids()).toEqual([straggler?.id]);
});

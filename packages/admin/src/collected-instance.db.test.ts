// A live instance whose per-instance row an operator collected as stale (its heartbeats could not
// reach the database for longer than the threshold: a partition) must not stop silently: its
// dispatcher re-registers the row where it was, audits it, logs it and counts it in a metric, and
// nothing it had not received is lost (a pending gap is delivered from its lowest id; events
// retention deleted meanwhile are reported).
import { createDispatcher, prune, type Consumer } from '@sluice/core';
import { appendEvents, capturingLogger, freshSchema, recordingConsumer, until } from '@sluice/testing';
import { heldTransaction, useLoginRole, useTestDatabase } from '@sluice/testing/vitest';
import { MeterProvider, MetricReader, type ResourceMetrics } from '@opentelemetry/sdk-metrics';
import { expect, onTestFinished, test } from 'vitest';
import { createAdmin } from './create-admin.js';

const db = await useTestDatabase();
const operator = useLoginRole(db, 'sluice_collector');
const PARK_LOCK = 773_002;

class ManualReader extends MetricReader {
  protected override onShutdown(): Promise<void> {
    return Promise.resolve();
  }
  protected override onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
}

async function setup(consumer: Consumer) {
  const schema = await freshSchema(db.sql, 'collected');
  const logger = capturingLogger();
  const { lines } = logger;
  const reader = new ManualReader();
  const meterProvider = new MeterProvider({ readers: [reader] });
  const dispatcher = createDispatcher({
    sql: db.sql,
    schema,
    consumers: [consumer],
    instanceId: 'pod-a',
    logger,
    meterProvider,
    listen: false,
    retryDelayMs: 0,
  });
  onTestFinished(() => dispatcher.stop());
  await dispatcher.ensureRegistered();
  const admin = createAdmin({ sql: db.sql, schema, lockTimeoutMs: 5_000, defaultActor: 'operator' });
  /** What an operator's GC does to a row whose heartbeat stopped reaching the database 2 h ago. */
  const collect = async () => {
    await db.sql`update ${db.sql(`${schema}.consumers`)} set last_seen_at = now() - interval '2 hours'`;
    const { removed } = await admin.collectStaleInstances({ olderThanMs: 3_600_000 });
    expect(removed.map((r) => r.instanceId)).toEqual(['pod-a']);
  };
  const reregistrations = async () => {
    const { resourceMetrics } = await reader.collect();
    return sumOf(resourceMetrics, 'sluice.consumer.reregistered');
  };
  return { schema, dispatcher, admin, lines, collect, reregistrations };
}

function sumOf(metrics: ResourceMetrics, name: string): number {
  let sum = 0;
  for (const scope of metrics.scopeMetrics)
    for (const metric of scope.metrics)
      if (metric.descriptor.name === name)
        for (const point of metric.dataPoints) sum += point.value as number;
  return sum;
}

test('a live instance re-registers its collected row where it was, and says so in the log, the audit and a metric', async () => {
  const feed = recordingConsumer('feed', { delivery: 'per-instance' });
  const s = await setup(feed.consumer);
  await appendEvents(db.sql, 3, undefined, s.schema);
  await s.dispatcher.runOnce();
  expect(feed.ids()).toEqual([1n, 2n, 3n]);

  await s.collect();
  await appendEvents(db.sql, 2, undefined, s.schema);
  await s.dispatcher.runOnce();
  await s.dispatcher.runOnce();

  expect(feed.ids()).toEqual([1n, 2n, 3n, 4n, 5n]); // nothing lost, nothing repeated
  const warning = s.lines.find((l) => l.level === 'warn' && /collected as stale/.test(l.message));
  expect(warning?.fields).toMatchObject({ consumer: 'feed', instanceId: 'pod-a', cursor: 3n });
  expect(await s.reregistrations()).toBe(1);
  const audit = await db.sql<{ action: string; cursor_after: string | null }[]>`
    select action, cursor_after::text from ${db.sql(`${s.schema}.audit`)} order by id`;
  expect(audit).toEqual([
    { action: 'collect-stale-instance', cursor_after: null },
    { action: 're-register', cursor_after: '3' },
  ]);
  expect((await s.admin.listConsumers()).map((c) => c.instanceId)).toEqual(['pod-a']);
});

test("a collected row's pending gap is delivered once its writer commits", async () => {
  const feed = recordingConsumer('feed', { delivery: 'per-instance' });
  const s = await setup(feed.consumer);
  const writer = await heldTransaction(db.sql);
  const [late] = await writer.append([{ streamId: 's', type: 'Late', data: {} }], { schema: s.schema });
  await appendEvents(db.sql, 2, undefined, s.schema);
  await s.dispatcher.runOnce();
  expect(feed.ids()).toEqual([2n, 3n]); // 1 is a pending gap

  await s.collect();
  await writer.commit();
  for (let i = 0; i < 4; i++) await s.dispatcher.runOnce();
  expect(feed.ids()).toContain(late?.id);
});

test('events pruned while the row was gone are reported, not skipped silently', async () => {
  const feed = recordingConsumer('feed', { delivery: 'per-instance' });
  const s = await setup(feed.consumer);
  await appendEvents(db.sql, 2, undefined, s.schema);
  await s.dispatcher.runOnce();
  await s.collect();
  await appendEvents(db.sql, 3, undefined, s.schema); // 3..5, never seen by the collected row
  await prune(db.sql, { before: 5n, schema: s.schema }); // the collected row no longer holds it back
  await s.dispatcher.runOnce();
  await s.dispatcher.runOnce();
  expect(feed.ids()).toEqual([1n, 2n, 5n]);
  const error = s.lines.find((l) => l.level === 'error' && /pruned/.test(l.message));
  expect(error?.fields).toMatchObject({ consumer: 'feed', prunedThrough: 4n });
});

test('a collected row that a start registered again, then deleted by hand, is registered as at start, not restored from the older collection', async () => {
  const feed = recordingConsumer('feed', { delivery: 'per-instance', startFrom: 'now' });
  const s = await setup(feed.consumer);
  await appendEvents(db.sql, 2, undefined, s.schema);
  await s.collect(); // collected at cursor 2 (its 'now' start)
  await appendEvents(db.sql, 3, undefined, s.schema); // 3..5
  await s.dispatcher.ensureRegistered(); // the instance starts again: registered at the head, 5
  await appendEvents(db.sql, 1, undefined, s.schema); // 6
  await db.sql`delete from ${db.sql(`${s.schema}.consumers`)} where name = 'feed'`;
  await s.dispatcher.runOnce();
  await s.dispatcher.runOnce();
  const [row] = await db.sql<{ cursor: string }[]>`
    select cursor::text from ${db.sql(`${s.schema}.consumers`)} where name = 'feed'`;
  expect(BigInt(row?.cursor ?? '0')).toBeGreaterThanOrEqual(6n);
  expect(feed.ids().filter((id) => id <= 5n)).toEqual([]); // nothing from before its start again
});

test("what a collection records is read once the rows are held: an operator's restart that committed while it waited is what it records", async () => {
  const feed = recordingConsumer('feed', { delivery: 'per-instance' });
  const s = await setup(feed.consumer);
  // The collection's locking statement parks on a row-level-security policy after its snapshot and
  // before it locks the row (the window widened on purpose).
  await operator.grant(s.schema);
  const role = operator.name;
  await db.sql.unsafe(`
    create function "${s.schema}".park_collection() returns boolean volatile language plpgsql as $$
    begin
      if current_user = '${role}' and current_query() ilike '%for update skip locked%' then
        perform pg_advisory_xact_lock_shared(${PARK_LOCK});
      end if;
      return true;
    end $$;
    alter table "${s.schema}".consumers enable row level security;
    create policy park on "${s.schema}".consumers to "${role}" using ("${s.schema}".park_collection());`);
  const writer = await heldTransaction(db.sql);
  await writer.append([{ streamId: 's', type: 'Abandoned', data: {} }], { schema: s.schema });
  await appendEvents(db.sql, 2, undefined, s.schema);
  await s.dispatcher.runOnce();
  expect(feed.ids()).toEqual([2n, 3n]); // 1 is a pending gap
  await db.sql`update ${db.sql(`${s.schema}.consumers`)} set last_seen_at = now() - interval '2 hours'`;

  const holder = await db.sql.reserve();
  await holder`select pg_advisory_lock(${PARK_LOCK})`;
  try {
    const collector = createAdmin({ sql: operator.sql(), schema: s.schema, lockTimeoutMs: 5_000 });
    const collecting = collector.collectStaleInstances({ olderThanMs: 3_600_000 });
    await until(async () => (await operator.parked()) > 0, 10_000, 'the collection to park before its lock');
    // Meanwhile an operator gives id 1 up: the cursor stays at 3, the gap goes.
    await s.admin.restart('feed', { instanceId: 'pod-a', from: 3n });
    await holder`select pg_advisory_unlock(${PARK_LOCK})`;
    expect((await collecting).removed.map((r) => r.cursor)).toEqual([3n]);
  } finally {
    await holder`select pg_advisory_unlock_all()`;
    holder.release();
  }
  const [audit] = await db.sql<{ details: { lowestPendingId: string | null } }[]>`
    select details from ${db.sql(`${s.schema}.audit`)} where action = 'collect-stale-instance'`;
  expect(audit?.details.lowestPendingId).toBeNull();

  // The instance comes back where the restart left it: from 3, without 2 and 3 again.
  await writer.rollback();
  await appendEvents(db.sql, 1, undefined, s.schema);
  await s.dispatcher.runOnce();
  await s.dispatcher.runOnce();
  expect(feed.ids()).toEqual([2n, 3n, 4n]);
});

// Cluster identity (docs/design.md §5.8): fences are xids of the cluster that took them. After a
// restore onto another cluster, no transaction of the old one can still commit, so one fresh fetch
// resolves every pending range, and the event is audited.
import { appendEvents, consumerRow, recordingConsumer } from '@sluice/testing';
import { heldTransaction, registeredDispatcher, useTestDatabase } from '@sluice/testing/vitest';
import { expect, test } from 'vitest';
import { rangesOf } from '../test-support.js';

const db = await useTestDatabase();

test('a consumer whose gaps were fenced on another cluster resolves them with one fetch and audits it', async () => {
  const c = recordingConsumer('restored');
  const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer]);
  const writer = await heldTransaction(db.sql);
  await writer.append([{ streamId: 's', type: 'InFlight', data: {} }], { schema }); // id 1, held open
  await appendEvents(db.sql, 1, undefined, schema); // id 2
  await dispatcher.runOnce(); // hole {1}
  await dispatcher.runOnce(); // fenced
  // The horizon is held by the writer, so on this cluster the range must stay pending…
  await dispatcher.runOnce();
  expect(await rangesOf(db.sql, schema, 'restored')).toHaveLength(1);
  // …but pretend the state was restored from a dump of another cluster.
  await db.sql`update ${db.sql(`${schema}.consumers`)} set system_identifier = '1'`;
  await dispatcher.runOnce();
  expect(await rangesOf(db.sql, schema, 'restored')).toEqual([]);
  const [audit] = await db.sql<
    { action: string; actor: string; details: { previousSystemIdentifier: string } }[]
  >`
    select action, actor, details from ${db.sql(`${schema}.audit`)}`;
  expect(audit).toMatchObject({
    action: 'cluster-changed',
    actor: 'sluice-dispatcher',
    details: { previousSystemIdentifier: '1' },
  });
  expect((await consumerRow(db.sql, schema, 'restored')).gapCount).toBe(0);
});

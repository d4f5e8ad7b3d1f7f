// Operator actions on a consumer run as lanes (docs/design.md §11) and on its parked keys: an
// action on the consumer acts on every lane; skip finds the lane stuck on the event; a parked key
// is listed with its events, replayed in order or dropped, each audited; a change of lanes is
// asked for, retargeted or refused while one drains.
import { KeyNotParkedError, LaneChangeInProgressError, type EventRecord } from '@sluice/core';
import {
  appendEvents,
  drainUntilIdle,
  freshSchema,
  holdGap,
  passUntil,
  untilWaitingForConsumerRow,
} from '@sluice/testing';
import { testDispatcher, useTestDatabase } from '@sluice/testing/vitest';
import { describe, expect, test } from 'vitest';
import { createAdmin } from './create-admin.js';

const db = await useTestDatabase();
const byStream = (n: number) => ({ streamId: `s-${n % 6}`, type: 'Placed', data: { n } });

async function setup(fails: (event: EventRecord) => boolean, parkKey = false, lanes = 3) {
  const schema = await freshSchema(db.sql, 'admlanes');
  const seen: EventRecord[] = [];
  const dispatcher = testDispatcher(
    db.sql,
    schema,
    [
      {
        name: 'reactor',
        lanes,
        errorPolicy: parkKey ? { maxAttempts: 1, parkKey: true } : { maxAttempts: 1 },
        handler: (event) => {
          if (fails(event)) throw new Error(`cannot handle ${event.streamId}`);
          seen.push(event);
        },
      },
    ],
    { rearmCooldownMs: 3_600_000 },
  );
  await dispatcher.ensureRegistered();
  const admin = createAdmin({ sql: db.sql, schema, lockTimeoutMs: 5_000, defaultActor: 'alice' });
  return { schema, dispatcher, admin, seen };
}

describe('a laned consumer', () => {
  test('show and diagnose sum the lanes up; disable, enable and restart act on every lane', async () => {
    const { schema, dispatcher, admin } = await setup(() => false);
    await appendEvents(db.sql, 30, byStream, schema);
    await drainUntilIdle(dispatcher);

    const shown = await admin.showConsumer('reactor');
    expect(shown).toMatchObject({ instanceId: '*', cursor: 30n, lagEvents: 0n, status: 'idle' });
    expect(shown.lanes?.map((l) => l.instanceId)).toEqual(['*0/3', '*1/3', '*2/3']);
    expect(shown.lanes?.map((l) => l.lane)).toEqual([
      { index: 0, count: 3 },
      { index: 1, count: 3 },
      { index: 2, count: 3 },
    ]);
    expect((await admin.diagnose('reactor')).findings).toEqual(['every lane (3) at the log head']);
    expect((await admin.listConsumers()).map((c) => c.instanceId)).toEqual(['*0/3', '*1/3', '*2/3']);

    const disabled = await admin.disable('reactor', { reason: 'maintenance' });
    expect(disabled.lanes?.map((l) => l.statusAfter)).toEqual(['disabled', 'disabled', 'disabled']);
    const enabled = await admin.enable('reactor');
    expect(enabled.lanes?.map((l) => l.statusAfter)).toEqual(['idle', 'idle', 'idle']);
    const restarted = await admin.restart('reactor', { from: 10n });
    expect(restarted.lanes?.map((l) => l.cursorAfter)).toEqual([10n, 10n, 10n]);
    // One lane alone, named.
    const one = await admin.disable('reactor', { instanceId: '*1/3' });
    expect(one).toMatchObject({ instanceId: '*1/3', statusAfter: 'disabled' });
    expect(one.lanes).toBeUndefined();
  });

  test('an action on the whole consumer whose lanes change while it waits acts on the lanes there are then', async () => {
    const { schema, admin } = await setup(() => false);
    const consumers = db.sql(`${schema}.consumers`);
    // A turn of lane *0/3 holds its row; meanwhile its change of lane count retires it and a new
    // lane *0/4 starts (as the rename here does in one step).
    const turn = await db.sql.reserve();
    await turn`begin`;
    await turn`select 1 from ${consumers} where instance_id = '*0/3' for update`;
    const disabling = admin.disable('reactor', { reason: 'maintenance' });
    await untilWaitingForConsumerRow(db.sql);
    await turn`update ${consumers} set instance_id = '*0/4' where instance_id = '*0/3'`;
    await turn`commit`;
    turn.release();
    const disabled = await disabling;
    expect(disabled.lanes?.map((l) => [l.instanceId, l.statusAfter])).toEqual([
      ['*0/4', 'disabled'],
      ['*1/3', 'disabled'],
      ['*2/3', 'disabled'],
    ]);
  });

  test('skip finds the lane stuck on the event; the others go on', async () => {
    const { schema, dispatcher, admin, seen } = await setup((e) => e.id === 8n);
    await appendEvents(db.sql, 18, byStream, schema);
    await dispatcher.runOnce();
    const stuck = (await admin.showConsumer('reactor')).lanes?.find((l) => l.status === 'dead');
    expect(stuck?.stuckEventId).toBe(8n);
    const diagnosis = await admin.diagnose('reactor');
    expect(diagnosis.findings.some((f) => f.startsWith(`lane ${stuck?.instanceId}: dead after`))).toBe(true);

    // An event no lane is stuck on is refused, and changes nothing.
    await expect(admin.skip('reactor', { eventId: 9n })).rejects.toMatchObject({
      code: 'SLUICE_SKIP_MISMATCH',
    });
    expect((await admin.showConsumer('reactor')).lanes?.find((l) => l.status === 'dead')?.stuckEventId).toBe(
      8n,
    );
    const skipped = await admin.skip('reactor', { eventId: 8n });
    expect(skipped.instanceId).toBe(stuck?.instanceId);
    await drainUntilIdle(dispatcher);
    expect(seen.map((e) => e.id).sort((a, b) => (a < b ? -1 : 1))).toEqual(
      Array.from({ length: 18 }, (_, i) => BigInt(i + 1)).filter((id) => id !== 8n),
    );
    const letters = await admin.listDeadLetters('reactor');
    expect(letters.map((l) => l.eventId)).toEqual([8n]);
  });

  test('fence gives a hole up in every lane that holds it', async () => {
    const { schema, dispatcher, admin } = await setup(() => false);
    const gap = await holdGap(db.sql, undefined, { schema });
    await appendEvents(db.sql, 6, byStream, schema);
    await dispatcher.runOnce();
    await gap.release({ commit: false });
    const fenced = await admin.fenceGap('reactor', { eventId: gap.id });
    expect(fenced.lanes?.map((l) => l.instanceId)).toEqual(['*0/3', '*1/3', '*2/3']);
    await drainUntilIdle(dispatcher);
    expect((await admin.showConsumer('reactor')).pendingGaps).toBe(0);
  });
});

describe('parked keys', () => {
  test('listed with their events; replayed in order once fixed; dropped; each audited', async () => {
    const broken = new Set(['s-1', 's-2']);
    const { schema, dispatcher, admin, seen } = await setup((e) => broken.has(e.streamId), true);
    await appendEvents(db.sql, 24, byStream, schema);
    await drainUntilIdle(dispatcher);

    const keys = await admin.listParkedKeys('reactor');
    expect(keys.map((k) => [k.key, k.firstEventId, k.events, k.attempts])).toEqual([
      ['s-1', 2n, 4, 1],
      ['s-2', 3n, 4, 1],
    ]);
    expect(keys[0]?.error).toBe('cannot handle s-1');
    const events = await admin.listParkedEvents('reactor', { key: 's-1' });
    expect(events.map((e) => e.eventId)).toEqual([2n, 8n, 14n, 20n]);
    expect(events.map((e) => e.error)).toEqual(['cannot handle s-1', null, null, null]);
    expect(events[0]?.data).toEqual({ n: 1 });
    expect((await admin.diagnose('reactor')).findings[0]).toMatch(/^2 parked key\(s\)/);

    broken.delete('s-1');
    const replay = await admin.replayParkedKey('reactor', { key: 's-1', reason: 'fixed the template' });
    expect(replay).toMatchObject({ key: 's-1', events: 4, action: 'replay-parked-key' });
    await drainUntilIdle(dispatcher);
    expect(seen.filter((e) => e.streamId === 's-1').map((e) => e.id)).toEqual([2n, 8n, 14n, 20n]);

    const dropped = await admin.dropParkedKey('reactor', { key: 's-2' });
    expect(dropped).toMatchObject({ key: 's-2', events: 4 });
    expect(await admin.listParkedKeys('reactor')).toEqual([]);
    await expect(admin.replayParkedKey('reactor', { key: 's-2' })).rejects.toBeInstanceOf(KeyNotParkedError);
    await expect(admin.listParkedEvents('reactor', { key: 'nope' })).rejects.toMatchObject({
      code: 'SLUICE_KEY_NOT_PARKED',
    });
    const audit = await admin.listAudit({ consumer: 'reactor' });
    expect(audit.map((a) => a.action).filter((a) => a.includes('parked'))).toEqual([
      'drop-parked-key',
      'replay-parked-key',
    ]);
  });
  test('a key handed to a new lane while the action waited is acted on under the new lane', async () => {
    const { schema, dispatcher, admin } = await setup((e) => e.streamId === 's-1', true);
    await appendEvents(db.sql, 12, byStream, schema);
    await drainUntilIdle(dispatcher);
    const lanes = db.sql(`${schema}.consumers`);
    const oldLane = (await admin.replayParkedKey('reactor', { key: 's-1' })).lane;
    await drainUntilIdle(dispatcher); // replayed, fails again: parked again under the same lane
    expect((await admin.listParkedKeys('reactor')).map((k) => k.key)).toEqual(['s-1']);
    // A turn of the owning lane holds its row and switches a change to 4 lanes (as a switch
    // commits it: the change marked switched and the new lanes started at the barrier) while the
    // operator's replay waits for that row.
    const turn = await db.sql.reserve();
    await turn`begin`;
    await turn`select 1 from ${lanes} where name = 'reactor' and instance_id = ${oldLane} for update`;
    const replaying = admin.replayParkedKey('reactor', { key: 's-1' });
    await untilWaitingForConsumerRow(db.sql);
    await turn`
      insert into ${db.sql(`${schema}.lane_changes`)} (consumer_name, from_lanes, to_lanes, barrier, requested_by, switched_at)
      values ('reactor', 3, 4, 12, 'test', now())`;
    await turn`
      insert into ${lanes} (name, instance_id, cursor)
      select 'reactor', '*' || i || '/4', 12 from generate_series(0, 3) as i`;
    await turn`commit`;
    turn.release();
    const replay = await replaying;
    const [now] = await db.sql<{ lane: string }[]>`
      select '*' || abs(hashtextextended('s-1', 0) % 4)::text || '/4' as lane`;
    expect(replay.lane).toBe(now?.lane);
    const audit = await admin.listAudit({ consumer: 'reactor' });
    expect(audit.find((a) => a.action === 'replay-parked-key')?.instanceId).toBe(now?.lane);
  });
});

describe('changing the lane count', () => {
  test.each(['skip, then relane', 'relane, then skip'])(
    'a lane dead on the event after the barrier: %s, and the change switches; nothing else is lost',
    async (order) => {
      const { schema, dispatcher, admin, seen } = await setup((e) => e.id === 3n, false, 1);
      await appendEvents(db.sql, 6, byStream, schema);
      await dispatcher.runOnce();
      expect(await admin.showConsumer('reactor')).toMatchObject({ status: 'dead', cursor: 2n });
      if (order === 'skip, then relane') await admin.skip('reactor', { eventId: 3n });
      expect(await admin.relane('reactor', { lanes: 2 })).toMatchObject({ outcome: 'started', barrier: 2n });
      if (order === 'relane, then skip') await admin.skip('reactor', { eventId: 3n });
      await appendEvents(db.sql, 3, (n) => byStream(n + 6), schema);
      await passUntil(
        dispatcher,
        async () =>
          (await admin.listConsumers()).every((c) => c.instanceId.endsWith('/2')) && seen.length >= 8,
        'the change to switch and the old lane to go',
      );
      await drainUntilIdle(dispatcher);
      expect((await admin.listConsumers()).map((c) => c.instanceId)).toEqual(['*0/2', '*1/2']);
      expect(seen.map((e) => e.id).sort((a, b) => (a < b ? -1 : 1))).toEqual([
        1n,
        2n,
        4n,
        5n,
        6n,
        7n,
        8n,
        9n,
      ]);
      expect((await admin.listDeadLetters('reactor')).map((d) => d.eventId)).toEqual([3n]);
    },
  );

  test('asked for by an operator, retargeted before it switches, refused while a switched one drains', async () => {
    const { schema, dispatcher, admin } = await setup(() => false);
    const gap = await holdGap(db.sql, undefined, { schema });
    await appendEvents(db.sql, 9, byStream, schema);
    await dispatcher.runOnce();

    const asked = await admin.relane('reactor', { lanes: 5 });
    expect(asked).toMatchObject({ from: 3, to: 5, outcome: 'started', barrier: 10n });
    expect(await admin.relane('reactor', { lanes: 4 })).toMatchObject({ outcome: 'retargeted', to: 4 });
    // Switched once every old lane is at the barrier (each takes a pass or more, as their turns
    // lock one another); the old lanes still hold the gap.
    await passUntil(
      dispatcher,
      async () => (await admin.showConsumer('reactor')).laneChange?.switched === true,
      'the change to switch over',
    );
    await expect(admin.relane('reactor', { lanes: 2 })).rejects.toBeInstanceOf(LaneChangeInProgressError);
    // Switched: a restart would have the old lanes and the new ones both deliver what is below the
    // barrier, each by its own hash. Refused, of the whole consumer and of one lane; nothing moved.
    const cursors = async () => (await admin.listConsumers()).map((c) => [c.instanceId, c.cursor]);
    const held = await cursors();
    await expect(admin.restart('reactor', { from: 'beginning' })).rejects.toBeInstanceOf(
      LaneChangeInProgressError,
    );
    await expect(admin.restart('reactor', { from: 10n, instanceId: '*1/4' })).rejects.toBeInstanceOf(
      LaneChangeInProgressError,
    );
    expect(await cursors()).toEqual(held);
    expect((await admin.diagnose('reactor')).findings[0]).toMatch(/^changing from 3 to 4 lanes: switched/);

    await gap.release({ commit: false });
    await drainUntilIdle(dispatcher);
    expect((await admin.listConsumers()).map((c) => c.instanceId)).toEqual(['*0/4', '*1/4', '*2/4', '*3/4']);
    expect(await admin.relane('reactor', { lanes: 4 })).toMatchObject({ outcome: 'unchanged' });
    expect((await admin.restart('reactor', { from: 10n })).lanes?.map((l) => l.cursorAfter)).toEqual([
      10n,
      10n,
      10n,
      10n,
    ]);
  });
});

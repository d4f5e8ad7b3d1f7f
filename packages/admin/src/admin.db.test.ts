import postgres from 'postgres';
import { append, prune, transaction, type Consumer, type Dispatcher } from '@sluice/core';
import {
  appendEvents,
  capturingLogger,
  consumerRow,
  drainUntilIdle,
  failingOn,
  gate,
  freshSchema,
  holdGap,
  openTransaction,
  recordingConsumer,
  until,
  untilWaitingForConsumerRow,
} from '@sluice/testing';
import {
  heldTransaction,
  registeredDispatcher,
  testDispatcher,
  useTestDatabase,
} from '@sluice/testing/vitest';
import { describe, expect, onTestFinished, test } from 'vitest';
import { createAdmin } from './create-admin.js';

const db = await useTestDatabase();

async function setup(consumers: readonly Consumer[], extra: { instanceId?: string } = {}) {
  // No automatic re-arm while a test looks at a dead consumer.
  const { schema, dispatcher } = await registeredDispatcher(
    db.sql,
    consumers,
    { rearmCooldownMs: 3_600_000, ...extra },
    'adm',
  );
  const admin = createAdmin({ sql: db.sql, schema, lockTimeoutMs: 5_000, defaultActor: 'test-operator' });
  return { schema, dispatcher, admin };
}

/** A gap at event 1 whose writer's transaction stays open (rolled back after the test). */
async function openGap(schema: string, type = 'Held') {
  const gap = await holdGap(db.sql, { streamId: 's', type, data: {} }, { schema });
  onTestFinished(() => gap.release({ commit: false }));
  return gap;
}

/** A per-instance consumer registered by pod-a (the admin's dispatcher) and by pod-b. */
async function twoInstances() {
  const feed: Consumer = { name: 'sse', delivery: 'per-instance', handler: () => undefined };
  const { admin, schema } = await setup([feed], { instanceId: 'pod-a' });
  await testDispatcher(db.sql, schema, [feed], { instanceId: 'pod-b' }).ensureRegistered();
  return { admin, schema };
}

/** A consumer whose handler waits for `held` to open; `inHandler()` once a call has begun. */
function heldConsumer(name: string) {
  const held = gate();
  let entered = false;
  const { consumer } = recordingConsumer(name, {
    handler: async () => {
      entered = true;
      await held.promise;
    },
  });
  return { consumer, held, inHandler: () => entered };
}

async function auditActions(schema: string): Promise<string[]> {
  const rows = await db.sql<
    { action: string }[]
  >`select action from ${db.sql(`${schema}.audit`)} order by id`;
  return rows.map((r) => r.action);
}

async function stuck(dispatcher: Dispatcher, times = 1) {
  for (let i = 0; i < times; i++) await dispatcher.runOnce();
}

test('createAdmin refuses a pool that transforms the rows it reads, naming the option', () => {
  const camel = db.connect({ max: 1, transform: postgres.camel });
  onTestFinished(() => camel.end());
  expect(() => createAdmin({ sql: camel })).toThrow(
    expect.objectContaining({ code: 'SLUICE_INVALID_OPTION', option: 'sql' }),
  );
});

test('createAdmin refuses durations a timer or PostgreSQL cannot take, naming the option', () => {
  for (const [option, value] of [
    ['lockTimeoutMs', 3e9],
    ['rearmCooldownMs', Number.MAX_SAFE_INTEGER],
  ] as const) {
    expect(() => createAdmin({ sql: db.sql, [option]: value })).toThrow(
      expect.objectContaining({ code: 'SLUICE_INVALID_OPTION', option }),
    );
  }
});

test('createAdmin refuses options that are not an object and an empty defaultActor (the audit names who acts)', () => {
  expect(() => createAdmin(undefined as never)).toThrow(
    expect.objectContaining({ code: 'SLUICE_INVALID_OPTION', option: 'sql' }),
  );
  expect(() => createAdmin('x' as never)).toThrow(
    expect.objectContaining({ code: 'SLUICE_INVALID_OPTION', option: 'options' }),
  );
  expect(() => createAdmin({ sql: db.sql, defaultActor: '' })).toThrow(
    expect.objectContaining({ code: 'SLUICE_INVALID_OPTION', option: 'defaultActor' }),
  );
});

test('every action given null for its options answers a typed error or its defaults, never a TypeError', async () => {
  const schema = await freshSchema(db.sql, 'adm');
  const admin = createAdmin({ sql: db.sql, schema }) as unknown as Record<
    string,
    (...args: unknown[]) => Promise<unknown>
  >;
  for (const [name, action] of Object.entries(admin)) {
    if (typeof action !== 'function') continue;
    for (const args of [['c', null], ['c', undefined], [null], ['c', 5]]) {
      const error = await action(...args).then(
        () => undefined,
        (e: unknown) => e,
      );
      if (error === undefined) continue;
      expect(error, `${name}(${args.map(String).join(', ')})`).not.toBeInstanceOf(TypeError);
      expect((error as { code?: unknown }).code, `${name}(${args.map(String).join(', ')})`).toMatch(
        /^SLUICE_/,
      );
    }
  }
  expect(await auditActions(schema)).toEqual([]);
});

test('a misspelt option of createAdmin or of an action is refused, naming it, and changes nothing', async () => {
  const failing = failingOn('mailer', (e) => e.id === 2n, { errorPolicy: { maxAttempts: 1 } });
  const { dispatcher, admin, schema } = await setup([failing.consumer]);
  await appendEvents(db.sql, 3, undefined, schema);
  await stuck(dispatcher, 2);
  expect(() => createAdmin({ sql: db.sql, schema, lockTimeoutMS: 5 } as never)).toThrow(
    expect.objectContaining({ code: 'SLUICE_INVALID_OPTION', option: 'lockTimeoutMS' }),
  );
  const row = async () => {
    const { status, cursor, attempts, stuckEventId, disabledUntil } = await admin.showConsumer('mailer');
    return { status, cursor, attempts, stuckEventId, disabledUntil };
  };
  const before = await row();
  // A disable for 5 s that would have been a disable with no end.
  const misspelt = await admin.disable('mailer', { formMs: 5_000 } as never).catch((e: unknown) => e);
  expect(misspelt).toMatchObject({ code: 'SLUICE_INVALID_OPTION', option: 'formMs' });
  expect((misspelt as Error).message).toContain('is not an option of admin.disable()');
  await expect(admin.skip('mailer', { eventId: 2n, instanceID: '*' } as never)).rejects.toMatchObject({
    option: 'instanceID',
  });
  await expect(admin.relane('mailer', { lanes: 2, instanceId: '*' } as never)).rejects.toMatchObject({
    option: 'instanceId',
  });
  await expect(admin.listAudit({ consumers: 'mailer' } as never)).rejects.toMatchObject({
    option: 'consumers',
  });
  // The options of dropVersion come third.
  await expect(admin.dropVersion('mailer', 1, { dropsource: true } as never)).rejects.toMatchObject({
    option: 'dropsource',
  });
  expect(await row()).toEqual(before);
  expect(await auditActions(schema)).toEqual([]);
  // What each action does know passes.
  expect(await admin.disable('mailer', { forMs: 5_000, reason: 'maintenance', actor: 'bob' })).toMatchObject({
    action: 'disable',
  });
});

describe('read models', () => {
  test('listConsumers shows status, cursor, head, lag and errors of every row', async () => {
    const healthy = recordingConsumer('healthy');
    const broken = failingOn('broken', (e) => e.id === 2n, { errorPolicy: { maxAttempts: 1 } });
    const { dispatcher, admin, schema } = await setup([healthy.consumer, broken.consumer]);
    await appendEvents(db.sql, 3, undefined, schema);
    await stuck(dispatcher, 2);
    const list = await admin.listConsumers();
    expect(list.map((c) => [c.name, c.status, c.cursor, c.head, c.lagEvents])).toEqual([
      ['broken', 'dead', 1n, 3n, 2n],
      ['healthy', 'idle', 3n, 3n, 0n],
    ]);
    const dead = list[0]!;
    expect(dead).toMatchObject({ attempts: 1, stuckEventId: 2n, instanceId: '*' });
    expect(dead.lastError).toContain('poison event 2');
    expect(dead.lagSeconds).toBeGreaterThanOrEqual(0);
  });

  test('a consumer stuck on its first event stagnates since its registration, whatever its failed attempts wrote', async () => {
    const first = failingOn('first', () => true, { errorPolicy: { maxAttempts: 1000 } });
    const { dispatcher, admin, schema } = await setup([first.consumer]);
    await appendEvents(db.sql, 1, undefined, schema);
    await db.sql`update ${db.sql(`${schema}.consumers`)} set created_at = now() - interval '1 hour'`;
    await stuck(dispatcher, 2); // failed attempts write the row (updated_at), never its progress
    const [row] = await admin.listConsumers();
    expect(row?.attempts).toBeGreaterThan(0);
    expect(row?.stagnationSeconds).toBeGreaterThanOrEqual(3_600);
  });

  test('diagnose names the backend whose open transaction keeps the oldest gap pending', async () => {
    const c = recordingConsumer('waiting');
    const { dispatcher, admin, schema } = await setup([c.consumer]);
    const { transaction: holder } = await openGap(schema);
    await holder.sql`set application_name = 'forgotten-batch-job'`;
    await appendEvents(db.sql, 1, undefined, schema);
    await stuck(dispatcher, 2); // observe, then fence
    const diagnosis = await admin.diagnose('waiting');
    expect(diagnosis.oldestGap).toMatchObject({ from: 1n, to: 1n });
    expect(diagnosis.oldestGap!.heldBy.map((b) => b.pid)).toContain(holder.pid);
    expect(diagnosis.findings.join('\n')).toContain(`pid ${holder.pid} (forgotten-batch-job`);
  });

  test('diagnose names the backend that holds the consumer row, and nobody once it is free', async () => {
    const c = recordingConsumer('held');
    const { admin, schema } = await setup([c.consumer]);
    expect((await admin.diagnose('held')).rowLockedBy).toBeNull();
    const holder = await heldTransaction(db.sql);
    await holder.sql`set local application_name = 'row-holder'`;
    await holder.sql`select 1 from ${holder.sql(schema)}.consumers where name = 'held' for update`;
    const diagnosis = await admin.diagnose('held');
    expect(diagnosis.rowLockedBy).toMatchObject({ pid: holder.pid, applicationName: 'row-holder' });
    expect(diagnosis.findings.join('\n')).toContain(
      `a turn holds its row now: pid ${holder.pid} (row-holder)`,
    );
    await holder.rollback();
    expect((await admin.diagnose('held')).rowLockedBy).toBeNull();
  });

  test('diagnose of a dead consumer gives its error and what to do', async () => {
    const c = failingOn('mailer', () => true, { errorPolicy: { maxAttempts: 1 } });
    const { dispatcher, admin, schema } = await setup([c.consumer]);
    await appendEvents(db.sql, 1, undefined, schema);
    await stuck(dispatcher);
    const diagnosis = await admin.diagnose('mailer');
    expect(diagnosis.findings[0]).toContain('dead after 1 failed attempt(s) on event 1: poison event 1');
    expect(diagnosis.nextRearmAt).toBeInstanceOf(Date);
  });

  test('a recovered consumer keeps its last error, resolved at its next progress by the database clock', async () => {
    const state = { failing: true };
    const c = failingOn('mailer', (e) => state.failing && e.id === 2n, { errorPolicy: { maxAttempts: 5 } });
    const { dispatcher, admin, schema } = await setup([c.consumer]);
    await appendEvents(db.sql, 3, undefined, schema);
    await stuck(dispatcher);
    const retrying = (await admin.listConsumers())[0]!;
    expect(retrying).toMatchObject({ attempts: 1, lastError: 'poison event 2' });
    expect(retrying.lastErrorResolvedAt).toBeNull();

    state.failing = false;
    await drainUntilIdle(dispatcher);
    const recovered = (await admin.listConsumers())[0]!;
    expect(recovered).toMatchObject({ status: 'idle', attempts: 0, cursor: 3n, lastError: 'poison event 2' });
    // It recovered by itself: the database keeps only its latest advance.
    expect(recovered.lastErrorResolvedAt).toEqual(recovered.lastProgressAt);
    expect(recovered.lastErrorResolvedAt!.getTime()).toBeGreaterThan(recovered.lastErrorAt!.getTime());
    expect(recovered.lastErrorResolvedBy).toBeNull();

    // A dead consumer's error is current, even when its cursor moved before it died.
    const dead = failingOn('dead', (e) => e.id === 2n, { errorPolicy: { maxAttempts: 1 } });
    const other = await setup([dead.consumer]);
    await appendEvents(db.sql, 2, undefined, other.schema);
    await stuck(other.dispatcher);
    const [deadRow] = await other.admin.listConsumers();
    expect(deadRow).toMatchObject({ status: 'dead', cursor: 1n, lastError: 'poison event 2' });
    expect(deadRow?.lastErrorResolvedAt).toBeNull();

    // An operator's skip resolves it: the skip's time, not the consumer's latest advance.
    await other.admin.skip('dead', { eventId: 2n, actor: 'alice' });
    const [skipped] = await other.admin.listConsumers();
    expect(skipped).toMatchObject({ status: 'idle', lastErrorResolvedAt: null }); // not advanced yet
    await drainUntilIdle(other.dispatcher);
    await appendEvents(db.sql, 1, undefined, other.schema);
    await drainUntilIdle(other.dispatcher);
    const [skipAudit] = await db.sql<{ at: Date }[]>`
      select at from ${db.sql(`${other.schema}.audit`)} where action = 'skip'`;
    const [afterSkip] = await other.admin.listConsumers();
    expect(afterSkip).toMatchObject({
      cursor: 3n,
      lastError: 'poison event 2',
      lastErrorResolvedBy: 'skip by alice',
    });
    expect(afterSkip?.lastErrorResolvedAt).toEqual(skipAudit?.at);
    expect(afterSkip!.lastProgressAt!.getTime()).toBeGreaterThan(skipAudit!.at.getTime());
  });

  test('showEvent reads one event of the log for a consumer, saying whether it is stuck on it', async () => {
    const c = failingOn('mailer', (e) => e.id === 2n, { errorPolicy: { maxAttempts: 1 } });
    const { dispatcher, admin, schema } = await setup([c.consumer]);
    await appendEvents(
      db.sql,
      3,
      (n) => ({ streamId: `order-${n}`, type: 'OrderPlaced', data: { n }, metadata: { source: 'test' } }),
      schema,
    );
    await stuck(dispatcher);
    const event = await admin.showEvent('mailer', { eventId: 2n });
    expect(event).toMatchObject({
      consumer: 'mailer',
      instanceId: '*',
      id: 2n,
      streamId: 'order-1',
      type: 'OrderPlaced',
      data: { n: 1 },
      metadata: { source: 'test' },
      stuck: true,
    });
    expect(event.createdAt).toBeInstanceOf(Date);
    expect((await admin.showEvent('mailer', { eventId: 1n })).stuck).toBe(false);
    await expect(admin.showEvent('mailer', { eventId: 99n })).rejects.toMatchObject({
      code: 'SLUICE_EVENT_NOT_FOUND',
    });
    await expect(admin.showEvent('nobody', { eventId: 1n })).rejects.toMatchObject({
      code: 'SLUICE_CONSUMER_NOT_FOUND',
    });
    await expect(admin.showEvent('mailer', { eventId: 0n })).rejects.toMatchObject({
      code: 'SLUICE_INVALID_OPTION',
    });
  });

  test('showDeadLetter reads one dead letter of its own consumer only', async () => {
    const c = failingOn('indexer', (e) => e.id === 2n, {
      errorPolicy: { maxAttempts: 1, skipApplyErrors: true },
    });
    const { dispatcher, admin, schema } = await setup([c.consumer, recordingConsumer('other').consumer]);
    await appendEvents(db.sql, 3, undefined, schema);
    await drainUntilIdle(dispatcher);
    const [listed] = await admin.listDeadLetters('indexer');
    expect(listed).toBeDefined();
    expect(await admin.showDeadLetter('indexer', { id: listed!.id })).toEqual(listed);
    await expect(admin.showDeadLetter('other', { id: listed!.id })).rejects.toMatchObject({
      code: 'SLUICE_DEAD_LETTER_NOT_FOUND',
    });
    await expect(admin.showDeadLetter('indexer', { id: listed!.id + 1n })).rejects.toMatchObject({
      code: 'SLUICE_DEAD_LETTER_NOT_FOUND',
    });
  });

  test('a list of dead letters leaves out payloads over 64 KiB, which the dead letter itself shows whole', async () => {
    const c = failingOn('indexer', () => true, { errorPolicy: { maxAttempts: 1, skipApplyErrors: true } });
    const { dispatcher, admin, schema } = await setup([c.consumer]);
    const big = 'x'.repeat(70_000);
    await appendEvents(
      db.sql,
      2,
      (n) => ({ streamId: 's', type: 'T', data: n === 0 ? { big } : { small: 1 } }),
      schema,
    );
    await drainUntilIdle(dispatcher);
    const [second, first] = await admin.listDeadLetters('indexer');
    expect(second?.data).toEqual({ small: 1 });
    expect(first?.data).toEqual({
      '$sluice.omitted': `${JSON.stringify({ big }).length + 1} bytes: read the dead letter by its id`,
    });
    expect(first?.metadata).not.toHaveProperty('$sluice.omitted');
    expect((await admin.showDeadLetter('indexer', { id: first!.id })).data).toEqual({ big });
  });

  test('an unknown consumer is a typed not-found error', async () => {
    const { admin } = await setup([recordingConsumer('known').consumer]);
    await expect(admin.diagnose('unknown')).rejects.toMatchObject({ code: 'SLUICE_CONSUMER_NOT_FOUND' });
    await expect(admin.restart('unknown', { from: 'beginning' })).rejects.toMatchObject({
      code: 'SLUICE_CONSUMER_NOT_FOUND',
    });
  });
});

describe('actions', () => {
  test('restart moves the cursor, clears attempts and gaps, and is audited', async () => {
    const c = failingOn('mailer', (e) => e.id === 3n, { errorPolicy: { maxAttempts: 1 } });
    const { dispatcher, admin, schema } = await setup([c.consumer]);
    await appendEvents(db.sql, 4, undefined, schema);
    await stuck(dispatcher);
    expect(await consumerRow(db.sql, schema, 'mailer')).toMatchObject({ cursor: 2n, status: 'dead' });
    const result = await admin.restart('mailer', { from: 'now', actor: 'alice', reason: 'give up on 3' });
    expect(result).toMatchObject({
      cursorBefore: 2n,
      cursorAfter: 4n,
      statusBefore: 'dead',
      statusAfter: 'idle',
    });
    expect(await consumerRow(db.sql, schema, 'mailer')).toMatchObject({
      cursor: 4n,
      status: 'idle',
      attempts: 0,
      gapCount: 0,
    });
    const [audit] = await admin.listAudit({ consumer: 'mailer' });
    expect(audit).toMatchObject({ action: 'restart', actor: 'alice', cursorBefore: 2n, cursorAfter: 4n });
    await admin.restart('mailer', { from: 1n });
    expect((await consumerRow(db.sql, schema, 'mailer')).cursor).toBe(1n);
  });

  test('a restart issued during a turn waits for it and is neither lost nor undone by its commit', async () => {
    const { consumer, held, inHandler } = heldConsumer('busy');
    const { dispatcher, admin, schema } = await setup([consumer]);
    await appendEvents(db.sql, 3, undefined, schema);
    const turn = dispatcher.runOnce();
    await until(inHandler);
    const restarting = admin.restart('busy', { from: 'beginning' });
    // The restart waits on the row lock the turn holds: wait until it is blocked, then let the turn go.
    await untilWaitingForConsumerRow(db.sql);
    held.open();
    await turn;
    const result = await restarting;
    expect(result.cursorBefore).toBe(3n); // it saw the turn's committed cursor…
    expect((await consumerRow(db.sql, schema, 'busy')).cursor).toBe(0n); // …and its own change stands
  });

  test('a skip issued while a turn delivers the stuck event decides on the row that turn committed: refused, nothing recorded', async () => {
    const retry = gate();
    let calls = 0;
    let inRetry = false;
    const c = recordingConsumer('flaky', {
      handler: async (event) => {
        if (event.id !== 2n) return;
        calls += 1;
        if (calls === 1) throw new Error('transient');
        inRetry = true;
        await retry.promise; // the retry succeeds, once the skip waits for the row
      },
    });
    const { dispatcher, admin, schema } = await setup([c.consumer]);
    await appendEvents(db.sql, 3, undefined, schema);
    await dispatcher.runOnce(); // fails on 2: stuck on it, one attempt
    expect(await admin.showConsumer('flaky')).toMatchObject({ stuckEventId: 2n, attempts: 1 });
    const turn = dispatcher.runOnce();
    await until(() => inRetry);
    const skipping = admin.skip('flaky', { eventId: 2n });
    skipping.catch(() => undefined);
    await untilWaitingForConsumerRow(db.sql);
    retry.open();
    await turn;
    // The turn delivered event 2: the skip, whose lock waited for that commit, must see it.
    await expect(skipping).rejects.toMatchObject({ code: 'SLUICE_SKIP_MISMATCH' });
    expect(await consumerRow(db.sql, schema, 'flaky')).toMatchObject({
      cursor: 3n,
      attempts: 0,
      skipEventId: null,
    });
    const letters = await db.sql`select 1 from ${db.sql(`${schema}.dead_letters`)}`;
    expect(letters.length).toBe(0);
    expect(await auditActions(schema)).toEqual([]);
  });

  test('a row held longer than lockTimeoutMs is reported busy and nothing changes', async () => {
    const { consumer, held, inHandler } = heldConsumer('held');
    const { dispatcher, schema } = await setup([consumer]);
    const impatient = createAdmin({ sql: db.sql, schema, lockTimeoutMs: 100 });
    await appendEvents(db.sql, 1, undefined, schema);
    const turn = dispatcher.runOnce();
    await until(inHandler);
    await expect(impatient.disable('held')).rejects.toMatchObject({ code: 'SLUICE_CONSUMER_BUSY' });
    held.open();
    await turn;
    expect((await consumerRow(db.sql, schema, 'held')).status).toBe('idle');
    expect(await auditActions(schema)).toEqual([]);
  });

  test('a restart that waits longer than lockTimeoutMs for a prune says the prune held it, not a turn', async () => {
    const c = recordingConsumer('waits');
    const { dispatcher, schema } = await setup([c.consumer]);
    await appendEvents(db.sql, 3, undefined, schema);
    await drainUntilIdle(dispatcher);
    // The prune parks in its delete, holding the retention lock, until the test's session lets go.
    const key = 4_242_001;
    const events = db.sql(`${schema}.events`);
    await db.sql.unsafe(`create function ${schema}.park_prune() returns trigger language plpgsql as
      $$ begin perform pg_advisory_lock_shared(${key}); perform pg_advisory_unlock_shared(${key}); return null; end $$`);
    await db.sql`create trigger park_prune before delete on ${events} for each statement execute function ${db.sql(`${schema}.park_prune`)}()`;
    const holder = await db.sql.reserve();
    onTestFinished(() => {
      holder.release();
    });
    await holder`select pg_advisory_lock(${key})`;
    const pruning = prune(db.sql, { before: 3n, schema });
    await until(async () => {
      const [row] = await db.sql<{ n: number }[]>`
        select count(*)::int as n from pg_locks where locktype = 'advisory' and objid = ${key} and not granted`;
      return (row?.n ?? 0) > 0;
    });
    const impatient = createAdmin({ sql: db.sql, schema, lockTimeoutMs: 200 });
    const refused = await impatient.restart('waits', { from: 'beginning' }).catch((e: unknown) => e);
    expect(refused).toMatchObject({
      code: 'SLUICE_CONSUMER_BUSY',
      message: expect.stringContaining('A prune of the log held the retention lock') as unknown,
    });
    await holder`select pg_advisory_unlock(${key})`;
    expect(await pruning).toEqual({ deleted: 2 });
    expect((await consumerRow(db.sql, schema, 'waits')).cursor).toBe(3n);
    expect(await auditActions(schema)).toEqual(['prune']);
  });

  test('skip refuses any event but the one the consumer is stuck on, and changes nothing then', async () => {
    const c = failingOn('mailer', (e) => e.id === 2n, { errorPolicy: { maxAttempts: 2 } });
    const { dispatcher, admin, schema } = await setup([c.consumer]);
    await appendEvents(db.sql, 3, undefined, schema);
    await stuck(dispatcher);
    const before = await consumerRow(db.sql, schema, 'mailer');
    const refused = await admin.skip('mailer', { eventId: 3n }).catch((e: unknown) => e);
    expect(refused).toMatchObject({ code: 'SLUICE_SKIP_MISMATCH', stuckEventId: 2n, requestedEventId: 3n });
    // Called from JavaScript without the options an action needs: a typed error, nothing changed.
    const untyped = admin as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
    for (const [action, args] of [
      ['skip', ['mailer']],
      ['restart', ['mailer']],
      ['fenceGap', ['mailer']],
      ['collectStaleInstances', []],
    ] as const) {
      await expect(untyped[action]!(...args), action).rejects.toMatchObject({
        code: 'SLUICE_INVALID_OPTION',
      });
    }
    expect(await consumerRow(db.sql, schema, 'mailer')).toEqual(before);
    expect(await auditActions(schema)).toEqual([]);
    const healthy = await setup([recordingConsumer('fine').consumer]);
    await expect(healthy.admin.skip('fine', { eventId: 1n })).rejects.toMatchObject({
      code: 'SLUICE_SKIP_MISMATCH',
    });
  });

  test('skip of the stuck event records a dead letter and the next turn passes it without the handler', async () => {
    const c = failingOn('mailer', (e) => e.id === 2n, { errorPolicy: { maxAttempts: 1 } });
    const { dispatcher, admin, schema } = await setup([c.consumer]);
    await appendEvents(db.sql, 3, undefined, schema);
    await stuck(dispatcher);
    expect((await consumerRow(db.sql, schema, 'mailer')).status).toBe('dead');
    const result = await admin.skip('mailer', { eventId: 2n, reason: 'bad address' });
    expect(result).toMatchObject({ statusAfter: 'idle', eventId: 2n });
    await drainUntilIdle(dispatcher);
    expect(c.ids()).toEqual([1n, 3n]);
    expect(c.failures.get(2n)).toBe(1);
    expect(await consumerRow(db.sql, schema, 'mailer')).toMatchObject({
      cursor: 3n,
      skipEventId: null,
      status: 'idle',
    });
    const [letter] = await admin.listDeadLetters('mailer');
    expect(letter).toMatchObject({
      eventId: 2n,
      reason: 'operator-skip',
      error: 'poison event 2',
      attempts: 1,
    });
    // Two operators racing to skip the same event: the second finds nothing to skip.
    await expect(admin.skip('mailer', { eventId: 2n })).rejects.toMatchObject({
      code: 'SLUICE_SKIP_MISMATCH',
    });
    expect(await auditActions(schema)).toEqual(['skip']);
  });

  test('skip of a late gap event that is poison removes it from the gaps without moving the cursor', async () => {
    const c = failingOn('indexer', (e) => e.type === 'Poison', { errorPolicy: { maxAttempts: 1 } });
    const { dispatcher, admin, schema } = await setup([c.consumer]);
    const late = await openGap(schema, 'Poison'); // id 1
    await appendEvents(db.sql, 2, undefined, schema); // 2, 3
    await dispatcher.runOnce(); // cursor 3, gap {1}
    await late.release({ commit: true });
    for (let i = 0; i < 5 && (await consumerRow(db.sql, schema, 'indexer')).status !== 'dead'; i++)
      await dispatcher.runOnce();
    expect(await consumerRow(db.sql, schema, 'indexer')).toMatchObject({ status: 'dead', cursor: 3n });
    await admin.skip('indexer', { eventId: 1n });
    await drainUntilIdle(dispatcher);
    expect(await consumerRow(db.sql, schema, 'indexer')).toMatchObject({
      status: 'idle',
      cursor: 3n,
      gapCount: 0,
    });
  });

  test('disable stops turns (a time-boxed one expires by itself); enable resumes with nothing lost', async () => {
    const c = recordingConsumer('feed');
    const { dispatcher, admin, schema } = await setup([c.consumer]);
    await admin.disable('feed', { reason: 'maintenance' });
    await appendEvents(db.sql, 2, undefined, schema);
    expect((await dispatcher.runOnce()).byConsumer['feed']?.skipped).toBe('disabled');
    expect(c.ids()).toEqual([]);
    await admin.enable('feed');
    await drainUntilIdle(dispatcher);
    expect(c.ids()).toEqual([1n, 2n]);
    await admin.disable('feed', { until: new Date(Date.now() + 60_000) });
    await db.sql`update ${db.sql(`${schema}.consumers`)} set disabled_until = now() - interval '1 second'`;
    await appendEvents(db.sql, 1, undefined, schema);
    await drainUntilIdle(dispatcher);
    expect(c.ids()).toEqual([1n, 2n, 3n]);
    for (const bad of [
      { forMs: Number.MAX_SAFE_INTEGER },
      { forMs: 31_536_000_001 },
      { until: new Date(8.64e15) },
      { until: new Date('0000-01-01T00:00:00Z') },
      { until: new Date(-8.64e15) },
    ]) {
      await expect(admin.disable('feed', bad)).rejects.toMatchObject({ code: 'SLUICE_INVALID_OPTION' });
    }
    await expect(admin.disable('feed', { until: new Date(Date.now() - 1000) })).rejects.toMatchObject({
      code: 'SLUICE_INVALID_OPTION',
      option: 'until',
    });
    expect(await auditActions(schema)).toEqual(['disable', 'enable', 'disable']);
  });

  test('a dead consumer disabled and enabled again calls its handler once more; still failing, it dies of its own error', async () => {
    let failing = true;
    const c = failingOn('mailer', (e) => failing && e.id === 2n, { errorPolicy: { maxAttempts: 2 } });
    const { dispatcher, admin, schema } = await setup([c.consumer]);
    await appendEvents(db.sql, 3, undefined, schema);
    await drainUntilIdle(dispatcher);
    expect(await consumerRow(db.sql, schema, 'mailer')).toMatchObject({ status: 'dead', attempts: 2 });
    await admin.disable('mailer');
    await admin.enable('mailer');
    await dispatcher.runOnce();
    expect(c.failures.get(2n)).toBe(3);
    const again = await consumerRow(db.sql, schema, 'mailer');
    expect(again).toMatchObject({ status: 'dead', attempts: 3, stuckEventId: 2n });
    expect(again.lastError).toContain('poison event 2');
    await admin.disable('mailer');
    await admin.enable('mailer');
    failing = false;
    await drainUntilIdle(dispatcher);
    expect(c.ids()).toEqual([1n, 2n, 3n]);
  });

  test('replay re-delivers dead letters through the handler on the next turn; a dry run only counts', async () => {
    let failing = true;
    const c = failingOn('mailer', (e) => failing && e.id === 2n, {
      errorPolicy: { maxAttempts: 1, skipApplyErrors: true },
    });
    const { dispatcher, admin, schema } = await setup([c.consumer]);
    await appendEvents(db.sql, 3, undefined, schema);
    await drainUntilIdle(dispatcher);
    expect(c.ids()).toEqual([1n, 3n]);
    expect(await admin.replayDeadLetters('mailer', { dryRun: true })).toMatchObject({
      count: 1,
      dryRun: true,
    });
    expect(await auditActions(schema)).toEqual([]);
    // An id that is not one of its dead letters refuses the whole call, the real one beside it too.
    const [pending] = await admin.listDeadLetters('mailer');
    await expect(
      admin.replayDeadLetters('mailer', { ids: [pending!.id, pending!.id + 1000n] }),
    ).rejects.toMatchObject({ code: 'SLUICE_DEAD_LETTER_NOT_FOUND', deadLetterId: pending!.id + 1000n });
    expect(await auditActions(schema)).toEqual([]);
    expect((await admin.listDeadLetters('mailer'))[0]?.replayRequestedAt).toBeNull();
    failing = false;
    const requested = await admin.replayDeadLetters('mailer');
    expect(requested.count).toBe(1);
    await drainUntilIdle(dispatcher);
    expect(c.ids()).toEqual([1n, 3n, 2n]);
    const [letter] = await admin.listDeadLetters('mailer');
    expect(letter?.replayedAt).toBeInstanceOf(Date);
    expect(await admin.replayDeadLetters('mailer', { dryRun: true })).toMatchObject({ count: 0 });
  });

  test('fenceGap inserts a tombstone: the consumer resolves the id, a late writer fails on the key', async () => {
    const c = recordingConsumer('strict', { ordering: 'strict' });
    const { dispatcher, admin, schema } = await setup([c.consumer]);
    // An id drawn and never used: a sequence jump leaves a hole no transaction owns.
    await appendEvents(db.sql, 1, undefined, schema); // 1
    await db.sql`select nextval(${`${schema}.events_id_seq`}::regclass)`; // 2: drawn, never inserted
    await appendEvents(db.sql, 1, undefined, schema); // 3
    const horizon = await heldTransaction(db.sql); // holds the horizon: 2 cannot burn
    await horizon.xid();
    for (let i = 0; i < 3; i++) await dispatcher.runOnce();
    expect(c.ids()).toEqual([1n]); // strict: waits at 2
    await expect(admin.fenceGap('strict', { eventId: 3n })).rejects.toMatchObject({
      code: 'SLUICE_NOT_A_GAP',
    });
    await admin.fenceGap('strict', { eventId: 2n, reason: 'sequence jump' });
    await dispatcher.runOnce();
    expect(c.ids()).toEqual([1n, 3n]); // the tombstone was resolved without the handler
    await expect(
      db.sql.unsafe(
        `insert into "${schema}".events (id, stream_id, type, data) overriding system value values (2, 's', 'Late', '{}')`,
      ),
    ).rejects.toMatchObject({ code: '23505' });
    expect(await auditActions(schema)).toEqual(['fence']);
  });

  test('fenceGap refuses an id that a running transaction still owns', async () => {
    const c = recordingConsumer('waiting');
    const { dispatcher, schema } = await setup([c.consumer]);
    const admin = createAdmin({ sql: db.sql, schema, lockTimeoutMs: 200 });
    await openGap(schema); // 1, uncommitted
    await appendEvents(db.sql, 1, undefined, schema);
    await dispatcher.runOnce();
    await expect(admin.fenceGap('waiting', { eventId: 1n })).rejects.toMatchObject({
      code: 'SLUICE_GAP_HELD',
    });
    expect(await auditActions(schema)).toEqual([]);
  });

  test('fenceGap waits for another consumer sharing the gap, and says so when its row stays held', async () => {
    const x = recordingConsumer('x', { ordering: 'strict' });
    const y = recordingConsumer('y', { ordering: 'strict' });
    const { dispatcher, schema } = await setup([x.consumer, y.consumer]);
    const admin = createAdmin({ sql: db.sql, schema, lockTimeoutMs: 200 });
    await appendEvents(db.sql, 1, undefined, schema); // 1
    await db.sql`select nextval(${`${schema}.events_id_seq`}::regclass)`; // 2: drawn, never inserted
    await appendEvents(db.sql, 1, undefined, schema); // 3
    const horizon = await heldTransaction(db.sql); // holds the horizon: 2 cannot burn
    await horizon.xid();
    await dispatcher.runOnce(); // both wait at 2
    // y's row held as its turn holds it.
    const turn = await heldTransaction(db.sql);
    await turn.sql`select 1 from ${turn.sql(`${schema}.consumers`)} where name = 'y' for update`;
    const refused = await admin.fenceGap('x', { eventId: 2n }).catch((e: unknown) => e);
    expect(refused).toMatchObject({ code: 'SLUICE_CONSUMER_BUSY', consumer: 'x' });
    expect((refused as Error).message).toMatch(
      /Another consumer with a pending gap at 2 .* nothing was changed for "x"/,
    );
    expect(await auditActions(schema)).toEqual([]);
    expect(await db.sql`select 1 from ${db.sql(`${schema}.events`)} where id = 2`).toHaveLength(0);
    await turn.commit();
    await admin.fenceGap('x', { eventId: 2n });
    await dispatcher.runOnce();
    expect(x.ids()).toEqual([1n, 3n]);
    expect(y.ids()).toEqual([1n, 3n]); // told to look again: the tombstone settles its gap too
  });

  test('collectStaleInstances removes per-instance rows of instances gone longer than the threshold', async () => {
    const { admin, schema } = await twoInstances();
    await db.sql`update ${db.sql(`${schema}.consumers`)} set last_seen_at = now() - interval '2 hours' where instance_id = 'pod-b'`;
    const { removed } = await admin.collectStaleInstances({ olderThanMs: 3_600_000 });
    expect(removed.map((r) => r.instanceId)).toEqual(['pod-b']);
    expect((await admin.listConsumers()).map((c) => c.instanceId)).toEqual(['pod-a']);
    for (const olderThanMs of [5, Number.MAX_SAFE_INTEGER]) {
      await expect(admin.collectStaleInstances({ olderThanMs })).rejects.toMatchObject({
        code: 'SLUICE_INVALID_OPTION',
      });
    }
  });

  test('per-instance consumers need an instanceId when there are several rows', async () => {
    const { admin } = await twoInstances();
    await expect(admin.disable('sse')).rejects.toMatchObject({
      code: 'SLUICE_INVALID_OPTION',
      option: 'instanceId',
    });
    await admin.disable('sse', { instanceId: 'pod-b' });
    expect((await admin.listConsumers()).map((c) => [c.instanceId, c.status])).toEqual([
      ['pod-a', 'idle'],
      ['pod-b', 'disabled'],
    ]);
  });

  test("a per-instance consumer's parked keys: none listed, and a key named is not parked (it parks none); an unknown consumer is not found", async () => {
    const { admin } = await twoInstances();
    expect(await admin.listParkedKeys('sse')).toEqual([]);
    await expect(admin.listParkedEvents('sse', { key: 'k' })).rejects.toMatchObject({
      code: 'SLUICE_KEY_NOT_PARKED',
    });
    await expect(admin.replayParkedKey('sse', { key: 'k' })).rejects.toMatchObject({
      code: 'SLUICE_KEY_NOT_PARKED',
    });
    await expect(admin.dropParkedKey('sse', { key: 'k' })).rejects.toMatchObject({
      code: 'SLUICE_KEY_NOT_PARKED',
    });
    await expect(admin.replayParkedKey('nobody', { key: 'k' })).rejects.toMatchObject({
      code: 'SLUICE_CONSUMER_NOT_FOUND',
    });
    await expect(admin.listParkedKeys('nobody')).rejects.toMatchObject({ code: 'SLUICE_CONSUMER_NOT_FOUND' });
  });

  test('restart below the retention floor is refused; beginning starts before the oldest kept event', async () => {
    const c = recordingConsumer('archive');
    const { dispatcher, admin, schema } = await setup([c.consumer]);
    await appendEvents(db.sql, 5, undefined, schema);
    await drainUntilIdle(dispatcher);
    await prune(db.sql, { before: 4n, schema });
    await expect(admin.restart('archive', { from: 1n })).rejects.toMatchObject({
      code: 'SLUICE_BELOW_RETENTION_FLOOR',
    });
    await expect(admin.restart('archive', { from: 99n })).rejects.toMatchObject({
      code: 'SLUICE_BEYOND_HEAD',
    });
    expect((await admin.restart('archive', { from: 'beginning' })).cursorAfter).toBe(3n);
    expect(await auditActions(schema)).toEqual(['prune', 'restart']);
    await drainUntilIdle(dispatcher);
    expect(c.ids()).toEqual([1n, 2n, 3n, 4n, 5n, 4n, 5n]);
    // Every event pruned: the head is where the floor is, and the restart the floor's refusal
    // advises is taken.
    await drainUntilIdle(dispatcher);
    await prune(db.sql, { before: 6n, schema });
    await expect(admin.restart('archive', { from: 4n })).rejects.toMatchObject({
      code: 'SLUICE_BELOW_RETENTION_FLOOR',
      message: expect.stringContaining('Restart from 5 or later') as unknown,
    });
    expect((await admin.restart('archive', { from: 5n })).cursorAfter).toBe(5n);
    expect((await admin.restart('archive', { from: 'now' })).cursorAfter).toBe(5n);
  });

  /** Events 1 to 4 in a fresh schema, 2 written by a transaction still open; with `pruned`, 1 and 3 are pruned. */
  async function lateWriter({ pruned }: { pruned: boolean }) {
    const schema = await freshSchema(db.sql, 'adm');
    await appendEvents(db.sql, 1, undefined, schema); // 1
    const writer = await openTransaction(db.sql);
    onTestFinished(() => writer.rollback());
    await writer.append([{ type: 'Late', streamId: 'late', data: {} }], { schema }); // 2, in flight
    await appendEvents(db.sql, 2, undefined, schema); // 3, 4
    // No consumer yet: nothing holds the writer's id, and the prune passes it.
    if (pruned) expect(await prune(db.sql, { before: 4n, schema })).toEqual({ deleted: 2 });
    /** Version `v` of consumer 'proj', recording the ids it is given in seen[v]. */
    const seen: bigint[][] = [];
    const version = (v: number, extra: Partial<Consumer> = {}): Consumer => ({
      name: 'proj',
      version: v,
      handler: (event) => {
        (seen[v] ??= []).push(event.id);
      },
      ...extra,
    });
    return { schema, writer, seen, version };
  }

  test('an event that a transaction in flight at a prune commits below the floor reaches a restart from the beginning and a rebuild', async () => {
    const { schema, writer, seen, version } = await lateWriter({ pruned: true });
    const one = testDispatcher(db.sql, schema, [version(1)]);
    await one.ensureRegistered();
    await one.runOnce(); // 4; 1 to 3 one pending range, 2 still in flight
    const admin = createAdmin({ sql: db.sql, schema });
    // Restarted from the beginning while the writer is in flight: at the floor (3), with the
    // writer's event among the stragglers it waits for.
    expect((await admin.restart('proj', { from: 'beginning' })).cursorAfter).toBe(3n);
    await one.runOnce();
    await writer.commit();
    await drainUntilIdle(one);
    expect(seen[1]).toEqual([4n, 4n, 2n]); // the writer's event, late, after the restart
    // Committed below the floor, it is kept: a restart from the beginning starts below it.
    expect((await admin.restart('proj', { from: 'beginning' })).cursorAfter).toBe(1n);
    await drainUntilIdle(one);
    expect(seen[1]).toEqual([4n, 4n, 2n, 2n, 4n]);
    // Committed below the floor, it is kept: a rebuild from the beginning starts before it.
    await one.stop();
    const both = testDispatcher(db.sql, schema, [version(1), version(2)]);
    await both.ensureRegistered();
    await drainUntilIdle(both);
    expect(seen[2]).toEqual([2n, 4n]);
    await both.stop();
  });

  test.each([
    ['from the beginning, below the retention floor', true, {}],
    ['from an id', false, { rebuild: { from: 3n } }],
  ])(
    'a rebuild %s, registered while a transaction holds a lower id open, gets that event when it commits',
    async (_, pruned, extra) => {
      const { schema, writer, seen, version } = await lateWriter({ pruned });
      // Version 2 starts at 3 (where the beginning of what was kept is, or where it is told to).
      const both = testDispatcher(db.sql, schema, [version(1), version(2, extra)]);
      await both.ensureRegistered();
      await both.runOnce();
      expect(seen[2]).toEqual([4n]);
      await writer.commit();
      await drainUntilIdle(both);
      // 2 committed after the rebuild was declared: it was in no state the rebuild started from.
      expect(seen[2]).toEqual([4n, 2n]);
      // Delivered, the rebuild's start is over: nothing holds a prune back for it.
      const [row] = await db.sql<{ start_upto: string | null }[]>`
        select start_upto::text from ${db.sql(schema)}.consumers where name = 'proj@v2'`;
      expect(row).toEqual({ start_upto: null });
      await both.stop();
    },
  );

  test('a turn that replays many parked keys, longer in all than its silence bound but answered throughout, is not cut', async () => {
    const schema = await freshSchema(db.sql, 'adm');
    let failing = true;
    let calls = 0;
    const logger = capturingLogger();
    // Silence bound: 300 + 2 × 300 + 2 × 200 = 1.3 s; eight keys of five 100 ms calls each take 4 s.
    const dispatcher = testDispatcher(
      db.sql,
      schema,
      [
        {
          name: 'pk',
          errorPolicy: { parkKey: true, maxAttempts: 1 },
          handler: async () => {
            calls += 1;
            if (failing) throw new Error('down');
            await new Promise((resolve) => setTimeout(resolve, 100));
          },
        },
      ],
      { maxTurnMs: 300, handlerTimeoutMs: 300, statementTimeoutMs: 200, logger },
    );
    await dispatcher.ensureRegistered();
    const events = Array.from({ length: 40 }, (_, i) => ({
      streamId: `k${Math.floor(i / 5)}`,
      type: 't',
      data: {},
    }));
    await transaction(db.sql, (tx) => append(tx, events, { schema }));
    await drainUntilIdle(dispatcher);
    const admin = createAdmin({ sql: db.sql, schema });
    expect(await admin.listParkedKeys('pk')).toHaveLength(8);
    failing = false;
    for (let k = 0; k < 8; k++) await admin.replayParkedKey('pk', { key: `k${k}` });
    calls = 0;
    const startedAt = performance.now();
    await dispatcher.runOnce();
    // The first pass's replays, of 100 ms calls one after the other, outlast the silence bound.
    expect(performance.now() - startedAt).toBeGreaterThan(1_300);
    await drainUntilIdle(dispatcher);
    // Each event once: no turn was cut and delivered again.
    expect(calls).toBe(40);
    expect(await admin.listParkedKeys('pk')).toEqual([]);
    expect(logger.lines.filter((l) => /connection is cut/.test(l.message))).toEqual([]);
  });

  test('names with SQL meta-characters are just names', async () => {
    const name = `x'; drop table events; --"`;
    const c = recordingConsumer(name);
    const { admin, schema } = await setup([c.consumer]);
    await admin.disable(name);
    expect((await consumerRow(db.sql, schema, name)).status).toBe('disabled');
    await expect(admin.enable('')).rejects.toMatchObject({ code: 'SLUICE_INVALID_OPTION' });
    await expect(admin.enable('a\u0000b')).rejects.toMatchObject({ code: 'SLUICE_INVALID_OPTION' });
    // An empty actor would name nobody in the audit: refused, and nothing is done.
    await expect(admin.enable(name, { actor: '' })).rejects.toMatchObject({
      code: 'SLUICE_INVALID_OPTION',
      option: 'actor',
    });
    expect((await consumerRow(db.sql, schema, name)).status).toBe('disabled');
  });
});

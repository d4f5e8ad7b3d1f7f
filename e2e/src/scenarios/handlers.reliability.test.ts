// docs/reliability.md §5, R1, H2, H4: what handlers do to the dispatcher. R1: handlers that need pool
// connections the turns already hold (pool exhaustion; max 1 + sql.reserve()). H2: a poison event
// in the middle of a batch. H4: handlers that append derived events, in the turn's transaction and
// on a connection of their own, in chains of depth 3.
import { createAdmin } from '@sluice/admin';
import {
  append,
  createDispatcher,
  transaction,
  type Consumer,
  type Dispatcher,
  type EventRecord,
  type HandlerContext,
} from '@sluice/core';
import { tables } from '@sluice/core/internal';
import {
  appendEvents,
  capturingLogger,
  consumerRow,
  drainUntilIdle,
  freshSchema,
  until,
} from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import { afterAll, expect, test } from 'vitest';
import { check, head, quietDispatcher, round, ScenarioRecorder } from './support.js';

const db = await useTestDatabase();
const recorder = new ScenarioRecorder('scenarios-handlers');

afterAll(async () => {
  await recorder.write(db.sql);
});

/** R1's dispatchers: no LISTEN, a 50 ms poll, retries at once and short backoffs, so a stall shows in seconds. */
const R1_PACE = {
  listen: false,
  pollIntervalMs: 50,
  retryDelayMs: 0,
  backoffInitialMs: 200,
  backoffMaxMs: 1_000,
} as const;

/** Settles with `promise`, or with 'timeout' after `ms`. */
async function within<T>(promise: Promise<T>, ms: number): Promise<T | 'timeout'> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<'timeout'>((resolve) => {
        timer = setTimeout(() => {
          resolve('timeout');
        }, ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Signs of life of a dispatcher run: deliveries and logged failures, with the longest stretch
 * between two of them (a silent hang shows as a long stretch with neither).
 */
function lifeline(logger: ReturnType<typeof capturingLogger>) {
  const deliveries: number[] = [];
  const startedAt = performance.now();
  return {
    deliveries,
    delivered() {
      deliveries.push(performance.now());
    },
    failures() {
      return logger.lines.filter(
        (l) => l.level === 'error' || (l.level === 'warn' && /fail|timed out/i.test(l.message)),
      );
    },
    /** Longest stretch (ms) without a delivery or a logged failure, from the start until `end`. */
    longestSilence(end: number) {
      const marks = [startedAt, ...deliveries, ...this.failures().map((l) => l.at), end]
        .filter((t) => t <= end)
        .sort((a, b) => a - b);
      let longest = 0;
      for (let i = 1; i < marks.length; i++) longest = Math.max(longest, marks[i]! - marks[i - 1]!);
      return longest;
    },
  };
}

test('R1a: pool max 2, five consumers whose handlers append through the same pool: the turns hold connections of their own, so it moves', async () => {
  await recorder.run('R1a', 'Pool exhaustion: max 2, 5 appending consumers', ['I9'], async (figures) => {
    const handlerTimeoutMs = 2_000;
    const statementTimeoutMs = 2_000;
    const roots = 6;
    const names = Array.from({ length: 5 }, (_, i) => `r1-c${i}`);
    const schema = await freshSchema(db.sql, 'r1a');
    const pool = db.connect({ max: 2, connection: { application_name: 'r1a-pool' } });
    const logger = capturingLogger();
    const life = lifeline(logger);
    const seen = new Map<string, bigint[]>(names.map((n) => [n, []]));
    const consumers: Consumer[] = names.map((name) => ({
      name,
      handler: async (event: EventRecord) => {
        life.delivered();
        seen.get(name)!.push(event.id);
        // Derived events through the pool the app gave as `sql`; the turn holds a connection of
        // Sluice's own pool (docs/operating.md, "Database client"), not one of these two.
        if (event.type === 'Root') {
          await transaction(pool, (tx) =>
            append(
              tx,
              [
                {
                  streamId: `${name}-derived`,
                  type: 'Derived',
                  data: { from: event.id.toString(), by: name },
                },
              ],
              {
                schema,
              },
            ),
          );
        }
      },
    }));
    const dispatcher = createDispatcher({
      sql: pool,
      schema,
      consumers,
      logger,
      ...R1_PACE,
      handlerTimeoutMs,
      statementTimeoutMs,
      rearmCooldownMs: 3_600_000,
    });
    await appendEvents(db.sql, roots, () => ({ streamId: 'r1', type: 'Root', data: {} }), schema);
    const expected = roots + roots * names.length;
    const started = performance.now();
    await dispatcher.start();
    const poolWarning = logger.lines.find((l) => l.level === 'warn' && l.message.includes('pool allows'));
    const done = async () => {
      const h = await head(db.sql, schema);
      if (h < BigInt(expected)) return false;
      for (const name of names) if ((await consumerRow(db.sql, schema, name)).cursor < h) return false;
      return true;
    };
    let completed = true;
    try {
      await until(done, 20_000, 'every consumer to reach the head', 50);
    } catch {
      completed = false;
    }
    const end = performance.now();
    const stopped = await within(dispatcher.stop(), 5_000);
    const t = tables(db.sql, schema);
    const derived = await db.sql<{ by: string; from: string; n: number }[]>`
      select data->>'by' as by, data->>'from' as from, count(*)::int as n from ${t.events}
      where type = 'Derived' group by 1, 2`;
    const states = await Promise.all(names.map((n) => consumerRow(db.sql, schema, n)));
    const failures = life.failures();
    const firstFailure = failures[0];
    const firstDelivery = life.deliveries[0];
    const silence = life.longestSilence(end);
    const totalDeliveries = [...seen.values()].reduce((s, ids) => s + ids.length, 0);
    const dupDeliveries = [...seen.values()].reduce((s, ids) => s + ids.length - new Set(ids).size, 0);

    figures['pool max / concurrency'] = '2 / 4 (default)';
    figures['handlerTimeoutMs / statementTimeoutMs'] = `${handlerTimeoutMs} / ${statementTimeoutMs}`;
    figures['pool-size warning at start (none expected)'] = poolWarning ? poolWarning.message : 'none';
    figures['outcome'] = completed
      ? `progress: all delivered in ${round((end - started) / 1000, 1)} s`
      : `NOT completed in 20 s: stalled at cursors ${states.map((s) => s.cursor).join('/')} of head ${await head(db.sql, schema)}`;
    figures['first delivery after start (ms)'] =
      firstDelivery === undefined ? 'none' : round(firstDelivery - started);
    figures['first failure logged after start (ms)'] = firstFailure
      ? round(firstFailure.at - started)
      : 'none';
    figures['failures logged'] = failures.length;
    figures['failure kinds'] = [...new Set(failures.map((f) => f.message))].slice(0, 4).join(' | ');
    figures['longest silence: no delivery, no failure (ms)'] = round(silence);
    figures['deliveries (duplicates)'] = `${totalDeliveries} (${dupDeliveries})`;
    figures['derived events (duplicate derivations)'] =
      `${derived.reduce((s, d) => s + d.n, 0)} (${derived.reduce((s, d) => s + d.n - 1, 0)})`;
    figures['consumers dead'] = states.filter((s) => s.status === 'dead').length;
    figures['failure categories'] = [...new Set(states.map((s) => s.failureCategory ?? '-'))].join(',');
    figures['stop()'] = stopped === 'timeout' ? 'hung > 5 s' : 'returned';
    figures['last delivery / last failure before the end (s ago)'] =
      `${life.deliveries.length > 0 ? round((end - life.deliveries[life.deliveries.length - 1]!) / 1000, 1) : '-'} / ${failures.length > 0 ? round((end - failures[failures.length - 1]!.at) / 1000, 1) : '-'}`;

    // The app's pool is not Sluice's: its size says nothing about the turns, so no warning.
    expect(poolWarning).toBeUndefined();
    // No silent deadlock: never longer than handlerTimeoutMs (plus one poll and a turn's own
    // statements) without a delivery or a recorded failure.
    check(
      silence <= handlerTimeoutMs + 1_000,
      `silent for ${round(silence)} ms (> handlerTimeoutMs ${handlerTimeoutMs} + 1000): no delivery and no failure recorded`,
    );
    check(completed, 'the consumers did not reach the head in 20 s');
    expect(stopped).not.toBe('timeout');
  });
});

test('R1b: pool max 1 and a handler that calls sql.reserve(): accepted with default options, and every event delivered', async () => {
  await recorder.run(
    'R1b',
    "Pool of one + sql.reserve() in the handler: the app's pool is the handler's alone",
    ['I9'],
    async (figures) => {
      const handlerTimeoutMs = 2_000;
      const statementTimeoutMs = 2_000;
      const schema = await freshSchema(db.sql, 'r1b');
      const pool = db.connect({ max: 1, connection: { application_name: 'r1b-pool' } });
      const logger = capturingLogger();
      const life = lifeline(logger);
      let reserved = 0;
      const consumer: Consumer = {
        name: 'r1b-reserver',
        errorPolicy: { maxAttempts: 3 },
        handler: async () => {
          life.delivered();
          const connection = await pool.reserve();
          reserved += 1;
          try {
            await connection`select 1`;
          } finally {
            connection.release();
          }
        },
      };
      // Default options (crash counting on): the turns and their crash records run on Sluice's own
      // connections, so a pool of one given as `sql` is accepted and left to the handler.
      let refusal = '';
      let dispatcher: ReturnType<typeof createDispatcher> | undefined;
      try {
        dispatcher = createDispatcher({
          sql: pool,
          schema,
          consumers: [consumer],
          logger,
          ...R1_PACE,
          handlerTimeoutMs,
          statementTimeoutMs,
          rearmCooldownMs: 3_600_000,
        });
      } catch (error) {
        refusal = error instanceof Error ? error.message : String(error);
      }
      figures['default options with max 1'] = refusal === '' ? 'accepted' : `refused: ${refusal}`;
      expect(refusal).toBe('');
      if (!dispatcher) return;
      await appendEvents(db.sql, 3, undefined, schema);
      const started = performance.now();
      const startResult = await within(dispatcher.start(), 20_000);
      const observeMs = 20_000;
      let completed = true;
      try {
        await until(
          async () =>
            (await consumerRow(db.sql, schema, 'r1b-reserver')).cursor === (await head(db.sql, schema)),
          observeMs,
          'the consumer to reach the head',
          50,
        );
      } catch {
        completed = false;
      }
      const end = performance.now();
      const state = await consumerRow(db.sql, schema, 'r1b-reserver');
      const failures = life.failures();
      const stopped = await within(dispatcher.stop(), 20_000);
      const ended = await within(pool.end({ timeout: 1 }), 5_000);

      figures['pool max / concurrency'] = '1 / 4 (default)';
      figures['start()'] = startResult === 'timeout' ? 'hung > 20 s' : 'returned';
      figures['outcome'] = completed
        ? `completed in ${round((end - started) / 1000, 1)} s`
        : `NOT completed in ${observeMs / 1000} s`;
      figures['handler calls / reserve() obtained'] = `${life.deliveries.length} / ${reserved}`;
      figures['failures logged'] = failures.length;
      figures['failure kinds'] = [...new Set(failures.map((f) => f.message))].slice(0, 4).join(' | ');
      figures['consumer: status / attempts / cursor'] =
        `${state.status} / ${state.attempts} / ${state.cursor}`;
      figures['stop() / pool.end()'] =
        `${stopped === 'timeout' ? 'hung > 20 s' : 'returned'} / ${ended === 'timeout' ? 'hung' : 'returned'}`;

      expect(startResult).not.toBe('timeout');
      check(completed, `the consumer did not reach the head in ${observeMs / 1000} s (${state.status})`);
      expect(failures).toEqual([]);
      expect(reserved).toBe(3);
      expect(state.status).toBe('idle');
      expect(stopped).not.toBe('timeout');
    },
  );
});

test('R1c: a turn whose connection dies mid-batch (what the idle-in-transaction kills of R1 do) stops delivering', async () => {
  await recorder.run(
    'R1c',
    'Turn connection lost mid-batch (non-transactional consumer)',
    ['I2', 'I3'],
    async (figures) => {
      const schema = await freshSchema(db.sql, 'r1c');
      const instanceId = 'r1c';
      const pool = db.connect({ max: 6, connection: { application_name: 'r1c-pool' } });
      const logger = capturingLogger();
      const calls: bigint[] = [];
      let inFlight = 0;
      let maxInFlight = 0;
      let returned = 0;
      let terminatedPid = 0;
      const consumer: Consumer = {
        name: 'r1c-consumer',
        batchSize: 6,
        handler: async (event: EventRecord) => {
          inFlight += 1;
          maxInFlight = Math.max(maxInFlight, inFlight);
          calls.push(event.id);
          try {
            if (terminatedPid === 0) {
              // The turn's own backend (it holds an xid: FOR UPDATE) dies under the first handler call.
              // Sluice's own connections are named after the instance (docs/operating.md).
              const [turn] = await db.sql<{ pid: number }[]>`
                select pid from pg_stat_activity where application_name = ${`sluice:${instanceId}`} and backend_xid is not null`;
              terminatedPid = turn?.pid ?? -1;
              await db.sql`select pg_terminate_backend(${terminatedPid})`;
            }
            await new Promise((resolve) => setTimeout(resolve, 200));
          } finally {
            inFlight -= 1;
            returned += 1;
          }
        },
      };
      const dispatcher = createDispatcher({
        sql: pool,
        schema,
        consumers: [consumer],
        instanceId,
        logger,
        ...R1_PACE,
      });
      const ids = (await appendEvents(db.sql, 6, undefined, schema)).map((e) => e.id);
      try {
        await dispatcher.start();
        await until(
          async () => (await consumerRow(db.sql, schema, 'r1c-consumer')).cursor === ids[5],
          20_000,
          'the consumer to reach the head',
          25,
        );
        // A stray caller of the dead turn would still be delivering the rest of its batch, one call
        // after another (each starts as the one before returns): wait until every call has returned.
        await until(
          () => inFlight === 0 && returned === calls.length,
          10_000,
          'every handler call to return',
        );
      } finally {
        await dispatcher.stop();
      }
      const failure = logger.lines.find((l) => l.level === 'error' && l.message.includes('turn failed'));
      const inversions = calls.filter(
        (id, i) => i > 0 && id < calls[i - 1]! && !(i === 1 && id === ids[0]),
      ).length;
      figures['terminated turn backend'] = terminatedPid > 0 ? 'yes' : 'no';
      figures['turn failure logged'] = failure ? 'yes' : 'no';
      figures['handler calls (order)'] = calls.join(',');
      figures['max concurrent handler calls of the shared consumer'] = maxInFlight;
      figures['inversions'] = inversions;
      figures['handler calls after the failure by the dead turn'] =
        calls.length - (1 + ids.length) > 0 ? calls.length - (1 + ids.length) : 0;

      expect(terminatedPid).toBeGreaterThan(0);
      expect(failure).toBeDefined();
      // Expected: the dead turn's handled event once more, then the batch once, in order, one at a time.
      check(
        maxInFlight === 1,
        `the failed turn kept calling the handler after its connection died, concurrently with the next turn of the same shared consumer (calls ${calls.join(',')})`,
      );
      expect(calls).toEqual([ids[0], ...ids]);
    },
  );
});

type PoisonVariant = 'handler' | 'transactional' | 'transactional batchHandler';

for (const variant of [
  'handler',
  'transactional',
  'transactional batchHandler',
] as const satisfies readonly PoisonVariant[]) {
  test(`H2 (${variant}): poison at position 50 of a batch of 100`, async () => {
    const id = variant === 'handler' ? 'H2' : variant === 'transactional' ? 'H2-tx' : 'H2-batch';
    await recorder.run(id, `Poison mid-batch (${variant})`, ['I2', 'I3', 'I5'], async (figures) => {
      const maxAttempts = 3;
      const schema = await freshSchema(db.sql, 'h2');
      const effectsTable = `${schema}.effects`;
      await db.sql`create table ${db.sql(effectsTable)} (event_id bigint not null)`;
      const ids = (await appendEvents(db.sql, 100, undefined, schema)).map((e) => e.id);
      const poison = ids[49]!; // position 50
      const calls = new Map<bigint, number>();
      const call = (event: EventRecord) => calls.set(event.id, (calls.get(event.id) ?? 0) + 1);
      let poisonHandlerCalls = 0;
      const effect = async (ctx: HandlerContext, events: readonly EventRecord[]) => {
        if (ctx.tx) {
          const tx = ctx.tx;
          await tx`insert into ${tx(effectsTable)} select unnest(${events.map((e) => e.id.toString())}::bigint[])`;
        }
      };
      const consumer: Consumer = {
        name: 'h2-consumer',
        batchSize: 100,
        transactional: variant !== 'handler',
        errorPolicy: { maxAttempts },
        handler: async (event, ctx) => {
          call(event);
          await effect(ctx, [event]);
          if (event.id === poison) {
            poisonHandlerCalls += 1;
            throw new Error(`poison ${event.id}`);
          }
        },
        ...(variant === 'transactional batchHandler'
          ? {
              batchHandler: async (events: readonly EventRecord[], ctx: HandlerContext) => {
                for (const event of events) call(event);
                await effect(ctx, events); // rolled back with the batch's savepoint when it throws
                if (events.some((e) => e.id === poison)) throw new Error(`poison ${poison} in the batch`);
              },
            }
          : {}),
      };
      const dispatcher = quietDispatcher(db.sql, schema, [consumer], {
        retryDelayMs: 0,
        rearmCooldownMs: 3_600_000,
      });
      try {
        await dispatcher.ensureRegistered();
        await dispatcher.runOnce();
        const afterFirst = await consumerRow(db.sql, schema, 'h2-consumer');
        const callsBefore = () => ids.slice(0, 49).map((i) => calls.get(i) ?? 0);
        const firstPassBefore = callsBefore();
        let passesToDead = 1;
        while ((await consumerRow(db.sql, schema, 'h2-consumer')).status !== 'dead' && passesToDead < 10) {
          await dispatcher.runOnce();
          passesToDead += 1;
        }
        const dead = await consumerRow(db.sql, schema, 'h2-consumer');
        const poisonCalls = poisonHandlerCalls;
        const poisonBatchCalls = (calls.get(poison) ?? 0) - poisonHandlerCalls;
        await createAdmin({ sql: db.sql, schema }).skip('h2-consumer', {
          eventId: poison,
          reason: 'H2 scenario',
        });
        await drainUntilIdle(dispatcher);
        const final = await consumerRow(db.sql, schema, 'h2-consumer');
        const t = tables(db.sql, schema);
        const letters = await db.sql<{ event_id: string }[]>`select event_id::text from ${t.deadLetters}`;
        const effects = await db.sql<{ event_id: string; n: number }[]>`
          select event_id::text, count(*)::int as n from ${db.sql(effectsTable)} group by 1`;
        const effectCount = new Map(effects.map((e) => [BigInt(e.event_id), e.n]));
        const dupsBefore = callsBefore().filter((n) => n > 1).length;
        const after = ids.slice(50);
        const dupsAfter = after.filter((i) => (calls.get(i) ?? 0) > 1).length;

        figures['cursor after the first pass'] = afterFirst.cursor.toString();
        figures['delivered before the poison in the first pass'] = firstPassBefore.filter(
          (n) => n > 0,
        ).length;
        figures['handler calls on the poison (maxAttempts)'] = `${poisonCalls} (${maxAttempts})`;
        if (variant === 'transactional batchHandler')
          figures['failed batch calls holding the poison'] = poisonBatchCalls;
        figures['passes until dead'] = passesToDead;
        figures['dead: cursor / attempts / stuck'] =
          `${dead.cursor} / ${dead.attempts} / ${dead.stuckEventId}`;
        figures['events before k delivered more than once'] = dupsBefore;
        figures['events after k delivered more than once'] = dupsAfter;
        figures['max calls of one event before k / after k'] =
          `${Math.max(...callsBefore())} / ${Math.max(...after.map((i) => calls.get(i) ?? 0))}`;
        if (variant !== 'handler') {
          figures['committed effects not exactly once'] = ids.filter(
            (i) => i !== poison && effectCount.get(i) !== 1,
          ).length;
          figures['committed effects of the poison'] = effectCount.get(poison) ?? 0;
        }
        figures['dead letters'] = letters.map((l) => l.event_id).join(',');
        figures['final cursor'] = final.cursor.toString();

        expect(afterFirst).toMatchObject({ cursor: poison - 1n, attempts: 1, stuckEventId: poison });
        expect(firstPassBefore.every((n) => n >= 1)).toBe(true);
        expect(dead).toMatchObject({ status: 'dead', attempts: maxAttempts, cursor: poison - 1n });
        expect(poisonCalls).toBe(maxAttempts);
        expect(letters.map((l) => BigInt(l.event_id))).toEqual([poison]);
        expect(final).toMatchObject({ cursor: ids[99], status: 'idle', attempts: 0 });
        expect(after.every((i) => (calls.get(i) ?? 0) >= 1)).toBe(true);
        if (variant === 'transactional batchHandler') {
          // Calls repeat (the failed batch, then one by one); committed effects must not.
          expect(ids.filter((i) => i !== poison && effectCount.get(i) !== 1)).toEqual([]);
          expect(effectCount.get(poison)).toBeUndefined();
        } else if (variant === 'transactional') {
          // The batch's savepoint is rolled back at the poison: the calls before it go once more
          // (in the turn that met it, their first writes undone), and commit once; the poison is
          // called once per attempt, the events after it once.
          expect(callsBefore().every((n) => n === 2)).toBe(true);
          expect(dupsAfter).toBe(0);
          expect(ids.filter((i) => i !== poison && effectCount.get(i) !== 1)).toEqual([]);
          expect(effectCount.get(poison)).toBeUndefined();
        } else {
          expect(dupsBefore).toBe(0);
          expect(dupsAfter).toBe(0);
        }
      } finally {
        await dispatcher.stop();
      }
    });
  });
}

test('H4: handlers append derived events (same transaction / own connection), chains of depth 3', async () => {
  await recorder.run('H4', 'Handlers that append derived events', ['I1', 'I3'], async (figures) => {
    const roots = 10;
    const depth = 3;
    const schema = await freshSchema(db.sql, 'h4');
    const pool = db.connect({ max: 8 });
    let runaway = false;
    const rootOf = (event: EventRecord) => {
      const root = event.data['root'];
      return typeof root === 'string' ? root : event.id.toString();
    };
    const derive = (event: EventRecord, type: string) => {
      const level = event.type === 'Root' ? 0 : Number(event.data['depth']);
      if (level > depth) runaway = true;
      return level < depth && (event.type === 'Root' || event.type === type)
        ? [
            {
              streamId: `h4-${rootOf(event)}`,
              type,
              data: { depth: level + 1, root: rootOf(event), parent: event.id.toString() },
            },
          ]
        : [];
    };
    const firstRoot = { id: 0n };
    const failOnce = new Set<string>();
    const maybeFail = (consumer: string, event: EventRecord) => {
      // One injected failure per consumer, after its append: the turn's outcome for that event is undone.
      if (event.id === firstRoot.id && !failOnce.has(consumer)) {
        failOnce.add(consumer);
        throw new Error(`${consumer}: injected failure after appending`);
      }
    };
    const seen = new Map<string, bigint[]>();
    const record = (name: string, event: EventRecord) => {
      seen.set(name, [...(seen.get(name) ?? []), event.id]);
    };
    const consumers: Consumer[] = [
      {
        name: 'h4-same-tx',
        transactional: true,
        handler: async (event, ctx) => {
          const events = derive(event, 'DerivedTx');
          if (events.length > 0) await append(ctx.tx!, events, { schema });
          maybeFail('h4-same-tx', event);
          record('h4-same-tx', event);
        },
      },
      {
        name: 'h4-own-connection',
        handler: async (event) => {
          const events = derive(event, 'DerivedConn');
          if (events.length > 0) await transaction(pool, (tx) => append(tx, events, { schema }));
          maybeFail('h4-own-connection', event);
          record('h4-own-connection', event);
        },
      },
      {
        name: 'h4-observer',
        handler: (event) => {
          record('h4-observer', event);
        },
      },
    ];
    const dispatcher: Dispatcher = quietDispatcher(pool, schema, consumers, {
      retryDelayMs: 0,
      rearmCooldownMs: 3_600_000,
    });
    try {
      await dispatcher.ensureRegistered();
      const appended = await appendEvents(
        db.sql,
        roots,
        (n) => ({ streamId: `root-${n}`, type: 'Root', data: {} }),
        schema,
      );
      firstRoot.id = appended[0]!.id;
      const passes = await drainUntilIdle(dispatcher, { timeoutMs: 30_000 });
      const headAfterDrain = await head(db.sql, schema);
      for (let i = 0; i < 5; i++) await dispatcher.runOnce();
      const t = tables(db.sql, schema);
      const rows = await db.sql<
        { id: string; type: string; depth: number | null; root: string | null; parent: string | null }[]
      >`
        select e.id::text as id, e.type, (e.data->>'depth')::int as depth, e.data->>'root' as root, e.data->>'parent' as parent
        from ${t.events} e order by e.id`;
      const all = rows.map((r) => BigInt(r.id));
      const ofType = (type: string) => rows.filter((r) => r.type === type);
      const dupDerivations = (type: string) => {
        const parents = ofType(type).map((r) => r.parent);
        return parents.length - new Set(parents).size;
      };
      const exactlyOnce = (name: string) => {
        const ids = seen.get(name) ?? [];
        return (
          ids.length === all.length && new Set(ids).size === all.length && all.every((i) => ids.includes(i))
        );
      };

      figures['roots / depth'] = `${roots} / ${depth}`;
      figures['events total'] = all.length;
      figures['derived same-tx (dup derivations)'] =
        `${ofType('DerivedTx').length} (${dupDerivations('DerivedTx')})`;
      figures['derived own-connection (dup derivations)'] =
        `${ofType('DerivedConn').length} (${dupDerivations('DerivedConn')})`;
      figures['max depth'] = Math.max(...rows.map((r) => r.depth ?? 0));
      figures['passes to drain'] = passes.length;
      figures['head moved after drain'] = (await head(db.sql, schema)) === headAfterDrain ? 'no' : 'yes';
      figures['every event delivered exactly once to each consumer'] = [
        'h4-same-tx',
        'h4-own-connection',
        'h4-observer',
      ]
        .map((n) => `${n}: ${exactlyOnce(n) ? 'yes' : 'no'}`)
        .join(', ');
      figures['injected failures after the append'] = failOnce.size;

      expect(runaway).toBe(false);
      expect(await head(db.sql, schema)).toBe(headAfterDrain); // no runaway loop
      expect(ofType('DerivedTx')).toHaveLength(roots * depth); // the failed attempt's append rolled back
      expect(dupDerivations('DerivedTx')).toBe(0);
      // The own-connection append committed before the failure: redelivery derives it again, and
      // the duplicate's chain continues to depth 3 (at-least-once: such handlers need an idempotency key).
      expect(dupDerivations('DerivedConn')).toBe(1);
      expect(ofType('DerivedConn')).toHaveLength(roots * depth + depth);
      expect(Math.max(...rows.map((r) => r.depth ?? 0))).toBe(depth);
      for (const name of ['h4-same-tx', 'h4-own-connection', 'h4-observer'])
        expect(exactlyOnce(name)).toBe(true);
    } finally {
      await dispatcher.stop();
    }
  });
});

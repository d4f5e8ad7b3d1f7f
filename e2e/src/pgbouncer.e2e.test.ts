// T8 (docs/operating.md, "Behind a pooler"): Sluice behind a real PgBouncer, in pool_mode=transaction
// and in pool_mode=session. The application's pool, both dispatchers, the writers and the operator
// actions all go through the pooler; behind a transaction pooler only LISTEN has a connection of
// its own to PostgreSQL (listenSql), and without one the dispatcher says so and polls.
import {
  append,
  createDispatcher,
  prune,
  silentLogger,
  transaction,
  type Consumer,
  type Dispatcher,
  type EventRecord,
  type Sql,
  type TransactionSql,
} from '@sluice/core';
import { createAdmin } from '@sluice/admin';
import sluice, { bearerAuth } from '@sluice/fastify';
import Fastify from 'fastify';
import { capturingLogger, freshSchema, holdGap, until } from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, onTestFinished, test } from 'vitest';
import { hasPgBouncer, startPgBouncer, type PgBouncer } from './rig/pgbouncer.js';

const available = hasPgBouncer();
if (!available && process.env['SLUICE_REQUIRE_PGBOUNCER']) {
  throw new Error(
    'SLUICE_REQUIRE_PGBOUNCER is set but pgbouncer does not run here (apt-get install pgbouncer)',
  );
}

const db = await useTestDatabase();

/** A pool through the pooler, as an application behind it creates it. */
function poolThrough(bouncer: PgBouncer, max = 10): Sql {
  const sql = postgres(bouncer.url, {
    max,
    // Behind a transaction pooler, prepared statements do not survive from one transaction to the
    // next, and statements are sent one at a time (docs/operating.md, "Behind a pooler").
    prepare: bouncer.mode === 'session',
    ...(bouncer.mode === 'transaction' ? { max_pipeline: 1 } : {}),
    fetch_types: false,
    onnotice: () => undefined,
  }) as unknown as Sql;
  onTestFinished(() => sql.end({ timeout: 2 }));
  return sql;
}

describe.skipIf(!available).each(['transaction', 'session'] as const)(
  'behind PgBouncer, pool_mode=%s',
  (mode) => {
    let bouncer: PgBouncer;
    beforeAll(async () => {
      bouncer = await startPgBouncer(db.url, mode);
    });
    afterAll(async () => {
      await bouncer.stop();
    });

    test('writers with rollbacks and a held gap, two dispatchers: every committed event once to each consumer, wake-ups by NOTIFY', async () => {
      const app = poolThrough(bouncer);
      const writerPool = poolThrough(bouncer); // another process's pool: its commits wake the others by NOTIFY
      const direct = db.connect({ max: 1, fetch_types: false });
      const schema = await freshSchema(app, 'pgb');
      await app`create table ${app(`${schema}.projection`)} (event_id bigint primary key)`;

      const seen = new Map<string, bigint[]>();
      const record = (name: string, event: EventRecord) => {
        const ids = seen.get(name) ?? [];
        ids.push(event.id);
        seen.set(name, ids);
      };
      const consumers: Consumer[] = [
        {
          name: 'plain',
          handler: (event) => {
            record('plain', event);
          },
        },
        {
          name: 'strict',
          ordering: 'strict',
          handler: (event) => {
            record('strict', event);
          },
        },
        {
          name: 'projection',
          transactional: true,
          handler: async (event, ctx) => {
            await (ctx.tx as TransactionSql)`
            insert into ${app(`${schema}.projection`)} values (${event.id.toString()}::bigint)`;
            record('projection', event);
          },
        },
      ];
      const dispatchers: Dispatcher[] = ['a', 'b'].map((instanceId) =>
        createDispatcher({
          sql: app,
          schema,
          instanceId,
          consumers,
          // Long on purpose: deliveries within it are wake-ups, not polls.
          pollIntervalMs: 3_000,
          logger: silentLogger,
          // Behind a transaction pooler LISTEN needs a session of its own.
          ...(mode === 'transaction' ? { listenSql: direct } : {}),
        }),
      );
      for (const d of dispatchers) {
        onTestFinished(() => d.stop());
        await d.start();
      }
      await until(() => dispatchers.every((d) => d.listenConnected), 10_000, 'LISTEN on both dispatchers');

      // A transaction holding an id open (a gap for everyone) while writers commit and roll back above it.
      const held = await holdGap(writerPool, undefined, { schema });
      let writing = true;
      let rolledBack = 0;
      const writers = Array.from({ length: 4 }, async (_, w) => {
        for (let n = 0; writing; n++) {
          try {
            await transaction(writerPool, async (tx) => {
              await append(
                tx,
                Array.from({ length: 1 + (n % 3) }, () => ({
                  streamId: `w${w}`,
                  type: 'Pooled',
                  data: { n },
                })),
                {
                  schema,
                },
              );
              if ((n + w) % 5 === 0) throw new Error('rolled back on purpose');
            });
          } catch {
            rolledBack += 1;
          }
        }
      });
      await new Promise((resolve) => setTimeout(resolve, 2_500));
      writing = false;
      await Promise.all(writers);
      await held.release({ commit: true });

      const committed = (
        await app<{ id: string }[]>`select id::text as id from ${app(`${schema}.events`)} e order by e.id`
      ).map((r) => BigInt(r.id));
      expect(committed.length).toBeGreaterThan(50);
      expect(rolledBack).toBeGreaterThan(0);
      await until(
        () =>
          ['plain', 'strict', 'projection'].every(
            (name) => (seen.get(name)?.length ?? 0) >= committed.length,
          ),
        20_000,
        'every consumer to receive every committed event',
      );
      for (const name of ['plain', 'strict', 'projection']) {
        const ids = seen.get(name) ?? [];
        expect(new Set(ids).size, `${name}: nothing twice`).toBe(ids.length);
        expect(
          [...ids].sort((x, y) => (x < y ? -1 : 1)),
          `${name}: every committed event`,
        ).toEqual(committed);
      }
      expect(seen.get('strict'), 'strict: in id order').toEqual(committed);
      // The handler records an event before its turn commits: the rows follow once the turns have.
      const projected = async () =>
        (
          await app<
            { id: string }[]
          >`select event_id::text as id from ${app(`${schema}.projection`)} p order by p.event_id`
        ).map((r) => BigInt(r.id));
      await until(
        async () => (await projected()).length >= committed.length,
        10_000,
        'the projection turns to commit',
      );
      expect(await projected()).toEqual(committed);

      // Wake-ups: a commit of the other pool reaches a dispatcher by NOTIFY, long before its next poll.
      const latencies: number[] = [];
      for (let i = 0; i < 5; i++) {
        const before = seen.get('plain')?.length ?? 0;
        const started = performance.now();
        await transaction(writerPool, (tx) =>
          append(tx, [{ streamId: 'late', type: 'Woken', data: { i } }], { schema }),
        );
        await until(() => (seen.get('plain')?.length ?? 0) > before, 5_000, 'the woken delivery');
        latencies.push(performance.now() - started);
      }
      expect(
        Math.max(...latencies),
        `wake-up latencies ${latencies.map(Math.round).join(', ')} ms`,
      ).toBeLessThan(1_500);
    });

    test("the plugin's ops routes through the pooler: 20 diagnose requests at once on a laned consumer all answer, and /health after them", async () => {
      const app = poolThrough(bouncer);
      const schema = await freshSchema(app, 'pgb');
      const direct = db.connect({ max: 1, fetch_types: false });
      onTestFinished(() => direct.end({ timeout: 1 }));
      const web = Fastify({ logger: false });
      onTestFinished(() => web.close());
      await web.register(sluice, {
        sql: app,
        schema,
        consumers: [{ name: 'lanes', lanes: 4, handler: () => undefined }],
        listen: false,
        logger: silentLogger,
        ...(mode === 'transaction' ? { listenSql: direct } : {}),
        ops: { auth: bearerAuth('t'.repeat(32), 'ops') },
      });
      await web.ready();
      const headers = { authorization: `Bearer ${'t'.repeat(32)}` };
      const answers = await Promise.all(
        Array.from({ length: 20 }, () =>
          web.inject({ method: 'GET', url: '/sluice/consumers/lanes/diagnose', headers }),
        ),
      );
      expect(answers.map((a) => a.statusCode)).toEqual(Array.from({ length: 20 }, () => 200));
      const health = await web.inject({ method: 'GET', url: '/sluice/health', headers });
      expect(health.statusCode).toBe(200);
    });

    test('operator actions and prune go through the pooler: skip, disable, enable, restart, replay, fence, prune', async () => {
      const app = poolThrough(bouncer);
      const schema = await freshSchema(app, 'pgb');
      const seen: bigint[] = [];
      const poison = new Set<bigint>();
      const dispatcher = createDispatcher({
        sql: app,
        schema,
        consumers: [
          {
            name: 'mailer',
            errorPolicy: { maxAttempts: 2 },
            handler: (event) => {
              if (poison.has(event.id)) throw new Error(`poison ${event.id}`);
              seen.push(event.id);
            },
          },
        ],
        listen: false,
        retryDelayMs: 0,
        rearmCooldownMs: 3_600_000,
        logger: silentLogger,
      });
      onTestFinished(() => dispatcher.stop());
      await dispatcher.ensureRegistered();
      const admin = createAdmin({ sql: app, schema, lockTimeoutMs: 5_000, defaultActor: 'pooled-operator' });

      const [first, bad] = await transaction(app, (tx) =>
        append(
          tx,
          [
            { streamId: 's', type: 'Ok', data: {} },
            { streamId: 's', type: 'Bad', data: {} },
          ],
          { schema },
        ),
      );
      poison.add(bad!.id);
      for (let i = 0; i < 3; i++) await dispatcher.runOnce();
      expect((await admin.showConsumer('mailer')).status).toBe('dead');
      await admin.skip('mailer', { eventId: bad!.id });
      await dispatcher.runOnce();
      expect(seen).toEqual([first!.id]);
      expect((await admin.showConsumer('mailer')).cursor).toBe(bad!.id);

      await admin.disable('mailer', { forMs: 60_000, reason: 'maintenance' });
      expect((await admin.showConsumer('mailer')).status).toBe('disabled');
      await admin.enable('mailer');
      expect((await admin.showConsumer('mailer')).status).toBe('idle');

      // The skipped event is a dead letter; replayed, it fails again (still poison), then passes.
      poison.delete(bad!.id);
      const replay = await admin.replayDeadLetters('mailer');
      expect(replay.count).toBe(1);
      await dispatcher.runOnce();
      expect(seen).toEqual([first!.id, bad!.id]);

      // A gap whose writer is gone for good is fenced by an operator.
      const held = await holdGap(app, undefined, { schema });
      await transaction(app, (tx) => append(tx, [{ streamId: 's', type: 'After', data: {} }], { schema }));
      await dispatcher.runOnce();
      await held.release({ commit: false });
      await admin.fenceGap('mailer', { eventId: held.id });
      await dispatcher.runOnce();
      await dispatcher.runOnce();
      expect((await admin.showConsumer('mailer')).pendingGaps).toBe(0);

      await admin.restart('mailer', { from: first!.id });
      await dispatcher.runOnce();
      const result = await prune(app, { before: first!.id + 1n, schema });
      expect(result.deleted).toBe(1);

      const audit = await admin.listAudit({});
      expect(audit.map((a) => a.action).sort()).toEqual(
        ['disable', 'enable', 'fence', 'prune', 'replay', 'restart', 'skip'].sort(),
      );
      expect(audit.filter((a) => a.action !== 'prune').every((a) => a.actor === 'pooled-operator')).toBe(
        true,
      );
    });

    test.skipIf(mode !== 'transaction')(
      "with prepare: true through the transaction pooler: Sluice's own connections stop preparing, say so once with the prepare: false hint, deliver from then on, stop() returns, and once the app sets it nothing is lost",
      async () => {
        // A pooler of its own that closes each server connection once it is a second old and
        // unused: a connection of the dispatcher soon runs a statement it prepared on a server
        // connection that is gone. (Through the shared pooler, that waited on other clients' traffic
        // handing it another server connection, and once did not happen within a minute.)
        // Server connections handed out in turn rather than the last one used first: a client's
        // next transaction rarely lands on the one it prepared on, whatever the load (CI once saw
        // no missing prepared statement within a minute, each client getting its server back).
        const recycling = await startPgBouncer(db.url, 'transaction', [
          'server_lifetime = 1',
          'server_round_robin = 1',
        ]);
        onTestFinished(() => recycling.stop());
        const fixed = poolThrough(recycling); // prepare: false, as the hint says
        const misconfigured = postgres(recycling.url, {
          max: 10,
          prepare: true,
          fetch_types: false,
          onnotice: () => undefined,
        }) as unknown as Sql;
        onTestFinished(() => misconfigured.end({ timeout: 2 }));
        // What the test reads to see progress goes to the server directly: only the application's
        // writes and the dispatchers meet the pooler.
        const look = postgres(db.url, { max: 2, onnotice: () => undefined }) as unknown as Sql;
        onTestFinished(() => look.end({ timeout: 2 }));
        const schema = await freshSchema(fixed, 'pgb');
        await fixed`create table ${fixed(`${schema}.projection`)} (event_id bigint primary key)`;
        const seen = new Set<bigint>();
        const consumers: Consumer[] = [
          {
            name: 'plain',
            handler: (event) => {
              seen.add(event.id);
            },
          },
          {
            name: 'projection',
            transactional: true,
            handler: async (event, ctx) => {
              await (ctx.tx as TransactionSql)`
              insert into ${fixed(`${schema}.projection`)} values (${event.id.toString()}::bigint)`;
            },
          },
        ];
        // Short timeouts: a transaction the driver left waiting on the old pool is cut after
        // handlerTimeoutMs + statementTimeoutMs, and stop() waits for it.
        const timing = {
          listen: false,
          pollIntervalMs: 100,
          backoffInitialMs: 50,
          backoffMaxMs: 200,
          handlerTimeoutMs: 2_000,
          statementTimeoutMs: 1_000,
        };
        // The application retries a transaction the pooler cut before it began: CI once saw a writer's
        // BEGIN end with PgBouncer's FATAL 'invalid server parameter' (08P01), which PgBouncer 1.18
        // sends when restoring the client's session parameters on a server connection fails; here
        // server connections are recycled each second beside a pool that misuses prepared statements.
        // The failed transaction stored nothing. Any other failure fails the test.
        let cut = 0;
        const appendAsTheApp = async (streamId: string, data: Record<string, unknown>) => {
          for (;;) {
            try {
              return await transaction(fixed, (tx) =>
                append(tx, [{ streamId, type: 'Pooled', data }], { schema }),
              );
            } catch (error) {
              const { code, message } = error as { code?: unknown; message?: unknown };
              if (code !== '08P01' || message !== 'invalid server parameter' || ++cut > 20) throw error;
            }
          }
        };
        const first = capturingLogger();
        const before = createDispatcher({
          sql: misconfigured,
          schema,
          consumers,
          ...timing,
          logger: first,
        });
        onTestFinished(() => before.stop());
        await before.start();

        // Writers keep the pooler handing each transaction another server connection, and another
        // client deallocates every prepared statement of the server connection it is handed (what a
        // pooler's next server connection has of them: none).
        let writing = true;
        const writers = Array.from({ length: 4 }, async (_, w) => {
          for (let n = 0; writing; n++) await appendAsTheApp(`w${w}`, { n });
        });
        const switched = () =>
          first.lines.findIndex((l) =>
            l.message.startsWith('a prepared statement did not survive to the next transaction'),
          );
        const deallocate = async () => {
          while (writing && switched() < 0) {
            await fixed.unsafe('deallocate all');
            await new Promise((resolve) => setTimeout(resolve, 20));
          }
        };
        const deallocating = deallocate();
        /** The log's last event once the first consumer has seen it, else undefined. */
        const deliveredHead = async () => {
          const [head] = await look<
            { id: string | null }[]
          >`select max(id)::text as id from ${look(`${schema}.events`)}`;
          const id = head?.id === null || head?.id === undefined ? undefined : BigInt(head.id);
          return id !== undefined && seen.has(id) ? id : undefined;
        };
        const delivered = async () => (await deliveredHead()) !== undefined;
        try {
          await until(() => switched() >= 0, 60_000, 'the switch to prepare: false');
          // From then on the turns run: a head committed after the switch reaches the consumer.
          await until(delivered, 30_000, 'a delivery after the switch');
        } finally {
          writing = false;
          await Promise.all([...writers, deallocating]);
        }
        const unprepared = first.lines.filter((l) =>
          l.message.startsWith('a prepared statement did not survive to the next transaction'),
        );
        expect(unprepared.map((l) => l.level)).toEqual(['warn']);
        expect(unprepared[0]?.fields['hint']).toBe(
          'prepared statements do not survive from one transaction to the next here: behind a transaction ' +
            "pooler such as PgBouncer, create the pool with prepare: false (docs/operating.md, 'Behind a pooler')",
        );
        // Turns that met a missing prepared statement around the switch failed (infrastructure, not
        // counted; postgres.js may misread the answers to a turn's pipelined statements then). Once
        // every pool of the dispatcher has stopped preparing, turns run: one more event reaches
        // both consumers without a failure. Both must have taken the writers' last events first:
        // a turn of the projection that began before the switch may still fail after the other
        // consumer has caught up.
        await until(
          async () => {
            const head = await deliveredHead();
            if (head === undefined) return false;
            const rows =
              await look`select 1 from ${look(`${schema}.projection`)} where event_id = ${head.toString()}::bigint`;
            return rows.length === 1;
          },
          30_000,
          'the last writes delivered to both consumers',
        );
        const afterSwitch = first.lines.length;
        const [last] = await appendAsTheApp('last', {});
        await until(
          async () =>
            seen.has(last!.id) &&
            (
              await look`select 1 from ${look(`${schema}.projection`)} where event_id = ${last!.id.toString()}::bigint`
            ).length === 1,
          30_000,
          'one more event at both consumers',
        );
        expect(
          first.lines.slice(afterSwitch).filter((l) => l.message.startsWith('turn failed (infrastructure)')),
        ).toEqual([]);
        const stopping = performance.now();
        await before.stop();
        expect(performance.now() - stopping).toBeLessThan(15_000);

        // The application follows the hint: every committed event reaches both consumers.
        const second = capturingLogger();
        const after = createDispatcher({ sql: fixed, schema, consumers, ...timing, logger: second });
        onTestFinished(() => after.stop());
        await after.start();
        const committed = (
          await look<{ id: string }[]>`select id::text as id from ${look(`${schema}.events`)} e order by e.id`
        ).map((r) => BigInt(r.id));
        expect(committed.length).toBeGreaterThan(0);
        const projected = async () =>
          (
            await look<
              { id: string }[]
            >`select event_id::text as id from ${look(`${schema}.projection`)} p order by p.event_id`
          ).map((r) => BigInt(r.id));
        await until(
          async () => committed.every((id) => seen.has(id)) && (await projected()).length >= committed.length,
          30_000,
          'every committed event at both consumers',
        );
        expect(await projected()).toEqual(committed);
        expect(second.lines.filter((l) => l.message.startsWith('turn failed'))).toEqual([]);
      },
    );

    test.skipIf(mode !== 'transaction')(
      'without listenSql, LISTEN through the transaction pooler: one warning, and polling delivers',
      async () => {
        const app = poolThrough(bouncer);
        const schema = await freshSchema(app, 'pgb');
        const logger = capturingLogger();
        const { lines } = logger;
        const seen: bigint[] = [];
        const dispatcher = createDispatcher({
          sql: app,
          schema,
          consumers: [{ name: 'feed', handler: (event) => void seen.push(event.id) }],
          pollIntervalMs: 200,
          logger,
        });
        onTestFinished(() => dispatcher.stop());
        await dispatcher.start();
        await until(
          () =>
            lines.some(
              (l) => l.level === 'warn' && l.message.startsWith('LISTEN does not receive notifications'),
            ),
          15_000,
          'the warning that LISTEN hears nothing',
        );
        expect(dispatcher.listenConnected).toBe(false);
        expect(lines.filter((l) => l.message.startsWith('LISTEN does not receive')).length).toBe(1);
        const [event] = await transaction(app, (tx) =>
          append(tx, [{ streamId: 's', type: 'Polled', data: {} }], { schema }),
        );
        await until(() => seen.includes(event!.id), 5_000, 'delivery by polling');
      },
    );
  },
);

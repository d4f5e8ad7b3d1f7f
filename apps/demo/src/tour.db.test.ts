// The README's "A five-minute tour", steps 3 to 5, run as written: the demo app as `pnpm start`
// builds it (the same consumers, mail provider and poll interval), the load script's traffic at
// the tour's rate and bounce share with a fixed seed, and exactly the operator actions the README
// names, sent to the ops routes as the dashboard sends them. It checks every claim those steps
// make, and that no other operator action was needed (the audit holds every write action).
import { until } from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import type { AddressInfo } from 'node:net';
import { expect, onTestFinished, test } from 'vitest';
import { buildApp, OPS_PREFIX } from './app.js';
import { MAILER_MAX_ATTEMPTS } from './consumers/mailer.js';
import { ORDER_STATS_MAX_ATTEMPTS } from './consumers/order-stats.js';
import { startTraffic } from './traffic.js';

const db = await useTestDatabase();
const PASSWORD = 'tour-ops-password';
const AUTH = `Basic ${Buffer.from(`ops:${PASSWORD}`).toString('base64')}`;

// The tour's `pnpm demo:load --rate 20` and its default bounce share, for 300 orders (15 s).
const RATE = 20;
const ORDERS = 300;
const BOUNCE_SHARE = 0.02;
const SEED = 26;

interface ConsumerView {
  name: string;
  status: string;
  cursor: string;
  head: string;
  lagEvents: string;
  attempts: number;
  stuckEventId: string | null;
}

interface DeadLetterView {
  eventId: string;
  streamId: string;
  type: string;
  reason: string;
  error: string | null;
  attempts: number;
}

interface AuditView {
  action: string;
  actor: string;
  consumer: string;
}

test(
  'the tour: under load no consumer dies and nobody acts; a poison event takes Diagnose and one Skip',
  { timeout: 120_000 },
  async () => {
    const lines: string[] = [];
    const { app, mails } = await buildApp({
      sql: db.sql,
      instanceId: 'tour',
      bounce: /^bounce/i, // pnpm start's default DEMO_BOUNCE
      opsPassword: PASSWORD,
      logLine: (line) => lines.push(line),
    });
    onTestFinished(() => app.close());
    await app.listen({ port: 0, host: '127.0.0.1' });
    const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
    const ops = async <T>(path: string, body?: unknown): Promise<T> => {
      const response = await fetch(`${base}${OPS_PREFIX}${path}`, {
        method: body === undefined ? 'GET' : 'POST',
        headers: {
          authorization: AUTH,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      expect(response.status, `${path}: ${await response.clone().text()}`).toBe(200);
      return (await response.json()) as T;
    };
    const consumers = async () => ops<ConsumerView[]>('/consumers');
    const consumer = async (name: string) => ops<ConsumerView>(`/consumers/${name}`);
    const atHead = async () => (await consumers()).every((c) => c.lagEvents === '0');
    const stats = async () => (await (await fetch(`${base}/stats`)).json()) as Record<string, number>;
    /** What /stats must say: the projection's counters recomputed from the event log. */
    const expectedStats = async (except = '0') => {
      const [row] = await db.sql<Record<string, string>[]>`
        select count(*) filter (where type = 'OrderPlaced')::text as placed,
               count(*) filter (where type = 'OrderPaid')::text as paid,
               count(*) filter (where type = 'OrderCancelled')::text as cancelled,
               coalesce(sum((data->>'amountCents')::bigint) filter (where type = 'OrderPaid'), 0)::text
                 as revenue_cents,
               coalesce(sum((data->>'totalCents')::bigint)
                 filter (where type = 'OrderCancelled' and (data->>'wasPaid')::boolean), 0)::text as refunded_cents
        from sluice.events where id <> ${except}::bigint`;
      return Object.fromEntries(Object.entries(row ?? {}).map(([name, value]) => [name, Number(value)]));
    };

    // Step 3: `pnpm demo:load --rate 20`, bouncing customers included. While it runs, the
    // dashboard's view is sampled as it refreshes (the operator only watches).
    const traffic = startTraffic({ base, rate: RATE, orders: ORDERS, bounceShare: BOUNCE_SHARE, seed: SEED });
    let mailerLagMax = 0;
    let retriesSeen = 0;
    const load = { running: true };
    const dashboard = (async () => {
      while (load.running) {
        const mailer = (await consumers()).find((c) => c.name === 'mailer');
        mailerLagMax = Math.max(mailerLagMax, Number(mailer?.lagEvents ?? 0));
        if ((mailer?.attempts ?? 0) > 0) retriesSeen += 1;
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    })();
    await traffic.done;
    load.running = false;
    await dashboard;
    expect(traffic.counts.errors, traffic.lastError).toBe(0);
    expect(traffic.counts.placed).toBe(ORDERS);
    expect(traffic.counts.bouncing).toBeGreaterThanOrEqual(3);

    // Step 4: no consumer turns dead (the dispatcher logs each one that does), and every consumer,
    // the mailer included, reaches the head without anyone acting.
    await until(
      async () => {
        expect(lines).toEqual([]); // a consumer that turns dead says so here: fail at once
        return atHead();
      },
      30_000,
      'every consumer to reach the head after the load',
    );
    for (const c of await consumers()) expect(c, c.name).toMatchObject({ status: 'idle', attempts: 0 });
    expect(lines).toEqual([]); // the console stays quiet: nothing died, retries are not logged there
    expect(await ops<AuditView[]>('/audit')).toEqual([]);
    expect(await stats()).toEqual(await expectedStats());

    // The mailer's dead letters: exactly one per mail to a bouncing customer (the load's summary
    // counts them), each with the provider's hard bounce, refused once: a permanent error uses up
    // every attempt at once (the dead letter records MAILER_MAX_ATTEMPTS).
    const letters = await ops<DeadLetterView[]>('/consumers/mailer/dead-letters?limit=1000');
    expect(letters).toHaveLength(traffic.counts.mailsToBouncing);
    expect(new Set(letters.map((l) => l.streamId))).toEqual(
      new Set(traffic.bouncingOrderIds.map((id) => `order-${id}`)),
    );
    for (const letter of letters) {
      expect(letter).toMatchObject({ reason: 'apply-error', attempts: MAILER_MAX_ATTEMPTS });
      expect(letter.error).toMatch(
        /^550 5\.1\.1 <bounce-\d+@example\.com>: mailbox does not exist \(hard bounce\)$/,
      );
    }
    const bounced = mails.refused.filter((m) => m.permanent);
    expect(bounced).toHaveLength(traffic.counts.mailsToBouncing); // one refusal each, no retry
    // Greylisted first deliveries were refused (451) and went through on the mailer's retry: every
    // mail to a customer whose address exists was sent, once.
    expect(retriesSeen, 'the dashboard never showed the mailer retrying').toBeGreaterThan(0);
    const deferred = mails.refused.filter((m) => !m.permanent);
    expect(deferred.length).toBeGreaterThan(0);
    expect(deferred.every((m) => m.reply.startsWith('451 '))).toBe(true);
    const events = traffic.counts.placed + traffic.counts.paid + traffic.counts.cancelled;
    expect(mails.sent).toHaveLength(events - traffic.counts.mailsToBouncing);
    expect(new Set(mails.sent.map((m) => m.eventId)).size).toBe(mails.sent.length);
    for (const m of deferred) expect(mails.sent.some((s) => s.eventId === m.eventId)).toBe(true);
    console.log(
      `tour: ${traffic.counts.placed} orders, ${traffic.counts.bouncing} bouncing customers, ` +
        `${letters.length} dead letters, ${deferred.length} greylisted deliveries retried; ` +
        `mailer lag at most ${mailerLagMax} events, retrying in ${retriesSeen} dashboard samples`,
    );

    // Step 5: a poison event. order-stats turns dead on it, says so in one log line, and the
    // other consumers go on.
    const poison = (await (await fetch(`${base}/demo/poison`, { method: 'POST' })).json()) as {
      eventId: string;
    };
    await until(
      async () => (await consumer('order-stats')).status === 'dead',
      30_000,
      'order-stats to turn dead',
    );
    expect(await consumer('order-stats')).toMatchObject({
      stuckEventId: poison.eventId,
      attempts: ORDER_STATS_MAX_ATTEMPTS,
    });
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      new RegExp(`^\\[sluice\\] consumer order-stats is DEAD: event ${poison.eventId} failed 3 attempts `),
    );
    await until(
      async () =>
        (await consumers()).filter((c) => c.name !== 'order-stats').every((c) => c.lagEvents === '0'),
      30_000,
      'the other consumers to go past the poison event',
    );

    // Diagnose says why; Skip, pre-filled (as in the dashboard's dialog) with the event it is stuck on.
    const diagnosis = await ops<{ findings: string[] }>('/consumers/order-stats/diagnose');
    expect(diagnosis.findings[0]).toContain(
      `dead after 3 failed attempt(s) on event ${poison.eventId}: OrderPaid event ${poison.eventId}`,
    );
    expect(diagnosis.findings[0]).toContain('amountCents is "4,50", not a whole number of cents');
    const stuck = (await consumer('order-stats')).stuckEventId;
    await ops('/consumers/order-stats/skip', { eventId: stuck });

    // The event is copied to the dead letters and order-stats catches up: /stats counts every
    // order exactly, and the skip was the one action taken.
    await until(atHead, 30_000, 'order-stats to catch up after the skip');
    expect((await consumer('order-stats')).status).toBe('idle');
    expect(await ops<DeadLetterView[]>('/consumers/order-stats/dead-letters')).toEqual([
      expect.objectContaining({ eventId: poison.eventId, reason: 'operator-skip', type: 'OrderPaid' }),
    ]);
    expect(await stats()).toEqual(await expectedStats(poison.eventId));
    expect(await ops<AuditView[]>('/audit')).toEqual([
      expect.objectContaining({ action: 'skip', actor: 'ops', consumer: 'order-stats' }),
    ]);
    expect(lines).toHaveLength(1);
  },
);

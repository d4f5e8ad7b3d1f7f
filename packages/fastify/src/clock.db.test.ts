// Times the database stores are judged by the database's clock, whatever the clock of the machine
// the operator or the app runs on says: a time-boxed disable ends when the database's clock says
// so (dispatchers compare disabled_until with it), so its end and the "in the future" check are
// decided there too; a consumer's stagnation and a gap's age are measured against the times the
// database wrote. These tests step this process's wall clock an hour away (only Date; timers and
// the monotonic clock keep running).
import { type Consumer } from '@sluice/core';
import { appendEvents, holdGap, recordingConsumer } from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import { afterEach, expect, onTestFinished, test, vi } from 'vitest';
import { bearerAuth } from './index.js';
import { pluginApp } from './test-support.js';

const db = await useTestDatabase();
const TOKEN = 'clock-token-0123456789abcdef';
const headers = { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' };
const HOUR_MS = 3_600_000;

afterEach(() => {
  vi.useRealTimers();
});

const build = (consumers: readonly Consumer[]) =>
  pluginApp(db.sql, consumers, { auth: bearerAuth(TOKEN, 'alice') }, { prefix: 'clk' });

function stepWallClock(ms: number): void {
  vi.useFakeTimers({ toFake: ['Date'], shouldAdvanceTime: true });
  vi.setSystemTime(Date.now() + ms);
}

async function secondsUntilReenabled(schema: string): Promise<number> {
  const [row] = await db.sql<{ seconds: number }[]>`
    select extract(epoch from disabled_until - now())::float8 as seconds
    from ${db.sql(`${schema}.consumers`)} where name = 'mailer'`;
  return row?.seconds ?? Number.NaN;
}

test("disable forMs counts from the database's now, with this machine's clock an hour behind", async () => {
  const { app, schema } = await build([recordingConsumer('mailer').consumer]);
  stepWallClock(-HOUR_MS);
  const response = await app.inject({
    method: 'POST',
    url: '/sluice/consumers/mailer/disable',
    headers,
    payload: { forMs: 60_000 },
  });
  expect(response.statusCode).toBe(200);
  const seconds = await secondsUntilReenabled(schema);
  expect(seconds).toBeGreaterThan(50);
  expect(seconds).toBeLessThanOrEqual(60);
  const [clock] = await db.sql<{ now: Date }[]>`select now()`;
  const until = new Date(response.json<{ until: string }>().until).getTime();
  expect(until - (clock?.now ?? new Date()).getTime()).toBeGreaterThan(50_000);
});

test("disable until is checked against the database's clock, with this machine's clock an hour ahead", async () => {
  const { app, schema } = await build([recordingConsumer('mailer').consumer]);
  const [clock] = await db.sql<{ now: Date }[]>`select now()`;
  const until = new Date((clock?.now ?? new Date()).getTime() + 10 * 60_000).toISOString();
  stepWallClock(HOUR_MS);
  const response = await app.inject({
    method: 'POST',
    url: '/sluice/consumers/mailer/disable',
    headers,
    payload: { until },
  });
  expect(response.statusCode).toBe(200);
  expect(await secondsUntilReenabled(schema)).toBeGreaterThan(9 * 60);

  const past = new Date((clock?.now ?? new Date()).getTime() - 60_000).toISOString();
  const refused = await app.inject({
    method: 'POST',
    url: '/sluice/consumers/mailer/disable',
    headers,
    payload: { until: past },
  });
  expect(refused.statusCode).toBe(400);
});

test("health does not call a consumer stagnating by this machine's clock, an hour ahead", async () => {
  const gate = { open: (): void => undefined };
  const held = new Promise<void>((resolve) => {
    gate.open = resolve;
  });
  const { app, schema } = await build([
    recordingConsumer('mailer', {
      handler: async () => {
        await held;
      },
    }).consumer,
  ]);
  await appendEvents(db.sql, 1, undefined, schema);
  stepWallClock(HOUR_MS);
  const response = await app.inject({ method: 'GET', url: '/sluice/health', headers });
  gate.open();
  expect(response.json()).toMatchObject({ stagnatingConsumers: [] });
});

test("diagnose gives a gap's age by the database's clock", async () => {
  const { app, schema } = await build([recordingConsumer('mailer').consumer]);
  const gap = await holdGap(db.sql, undefined, { schema });
  onTestFinished(() => gap.release({ commit: false }));
  await appendEvents(db.sql, 1, undefined, schema);
  await app.sluice.dispatcher.runOnce();
  await app.sluice.dispatcher.runOnce();
  stepWallClock(HOUR_MS);
  const response = await app.inject({ method: 'GET', url: '/sluice/consumers/mailer/diagnose', headers });
  const body = response.json<{ oldestGap: { ageSeconds: number } | null }>();
  expect(body.oldestGap?.ageSeconds).toBeLessThan(60);
});

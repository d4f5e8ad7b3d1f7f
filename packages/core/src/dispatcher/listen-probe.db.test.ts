// The LISTEN probe (docs/design.md §4.8): a listener whose probes were not heard falls back to
// polling, says so once, probes again with a backoff, and says once when wake-ups are back. Here
// the probes are lost by sending them on another channel for a while, as a loaded server or a
// transaction pooler loses them.
import { until } from '@sluice/testing';
import { randomBytes } from 'node:crypto';
import { useTestDatabase } from '@sluice/testing/vitest';
import { expect, onTestFinished, test } from 'vitest';
import { silentLogger, type Logger } from '../logger.js';
import { startListener } from './wake-up.js';

const db = await useTestDatabase();

/** A listener on `channel` whose probes go through `probe`, probing again after 50 to 200 ms; stopped after the test. */
async function probingListener(
  channel: string,
  logger: Logger,
  connected: boolean[],
  { probe, onWake = () => undefined }: { probe: (payload: string) => Promise<unknown>; onWake?: () => void },
): Promise<void> {
  const listener = await startListener({
    sql: db.sql,
    channel,
    ownNonce: 'own',
    applicationName: 'sluice-listen-probe-test',
    logger,
    checkMs: 60_000,
    reprobeInitialMs: 50,
    reprobeMaxMs: 200,
    onWake,
    onConnectedChange: (value) => connected.push(value),
    probe,
  });
  onTestFinished(() => listener.stop());
}

test('probes that went unheard turn wake-ups off only until a later probe is heard: one line each way', async () => {
  const channel = `sluice_probe_${randomBytes(4).toString('hex')}`;
  const lines: { level: string; message: string }[] = [];
  const keep = (level: string) => (_fields: object, message: string) => {
    lines.push({ level, message });
  };
  const logger: Logger = { ...silentLogger, info: keep('info'), warn: keep('warn') };
  let lost = true;
  let probesWhileDeaf = 0;
  const connected: boolean[] = [];
  let wakes = 0;
  const fellBack = () => lines.filter((l) => l.message.startsWith('LISTEN does not receive notifications'));
  const cameBack = () => lines.filter((l) => l.message.startsWith('LISTEN receives notifications again'));

  await probingListener(channel, logger, connected, {
    onWake: () => {
      wakes += 1;
    },
    probe: (payload) => {
      if (fellBack().length > 0) probesWhileDeaf += 1;
      return db.sql`select pg_notify(${lost ? `${channel}_elsewhere` : channel}, ${payload})`;
    },
  });

  await until(() => fellBack().length === 1, 20_000, 'the fallback to polling');
  expect(fellBack()[0]?.level).toBe('warn');
  expect(connected).toEqual([true, false]);
  // Still deaf: it probes again, without saying so again.
  await until(() => probesWhileDeaf >= 2, 20_000, 'a probe after the fallback');
  expect(fellBack()).toHaveLength(1);

  lost = false;
  await until(() => cameBack().length === 1, 20_000, 'wake-ups to come back');
  expect(cameBack()[0]?.level).toBe('info');
  expect(connected).toEqual([true, false, true]);
  expect(fellBack()).toHaveLength(1);

  // Wake-ups work again: a notification from another connection reaches the listener.
  const before = wakes;
  await db.sql`select pg_notify(${channel}, 'from-elsewhere')`;
  await until(() => wakes > before, 10_000, 'the wake-up');
});

test('a probe that could not be sent is tried again later: a listener that does not hear is found out then', async () => {
  const channel = `sluice_probe_${randomBytes(4).toString('hex')}`;
  const lines: string[] = [];
  const logger: Logger = { ...silentLogger, warn: (_fields, message) => lines.push(message) };
  let mode: 'failing' | 'lost' = 'failing';
  const connected: boolean[] = [];
  await probingListener(channel, logger, connected, {
    // The server refuses the probe (a function it does not have), then takes it but the listener
    // never hears it, as behind a transaction pooler.
    probe: (payload) =>
      mode === 'failing'
        ? db.sql`select pg_notify(${channel}, ${payload}, 'no such argument')`
        : db.sql`select pg_notify(${`${channel}_elsewhere`}, ${payload})`,
  });
  const unsent = () => lines.filter((l) => l.startsWith('could not send the LISTEN probe'));
  await until(() => unsent().length === 1, 20_000, 'the probe to fail');
  expect(connected).toEqual([true]);
  mode = 'lost';
  await until(
    () => lines.some((l) => l.startsWith('LISTEN does not receive notifications')),
    20_000,
    'the fallback to polling once a probe is sent',
  );
  expect(connected).toEqual([true, false]);
  expect(unsent()).toHaveLength(1); // said once, not at every try
});

// Connections Sluice opens are bounded through PostgreSQL's whole startup, also against a port that
// answers but is not PostgreSQL (postgres.js alone reconnects to it for ever).
import { createServer as createHttpServer } from 'node:http';
import { createServer as createTcpServer } from 'node:net';
import { postgresJsMajor } from '@sluice/testing';
import { listening, useTestDatabase } from '@sluice/testing/vitest';
import postgres from 'postgres';
import { describe, expect, onTestFinished, test } from 'vitest';
import { checkConnection, connectTimeoutMsOf } from './connect-timeout.js';
import { createDispatcher } from './dispatcher/create-dispatcher.js';
import { startListener } from './dispatcher/wake-up.js';
import { ConnectTimeoutError } from './errors.js';
import { silentLogger, type Logger } from './logger.js';
import type { Sql } from './sql-types.js';

const db = await useTestDatabase();

/**
 * What a port that is not PostgreSQL gives: postgres.js 3 tries again until connect_timeout,
 * 4 says at once that the answer was in another protocol.
 */
function notPostgres(port: number, timeoutS: number): string {
  return postgresJsMajor >= 4
    ? `no PostgreSQL server completed a connection at 127.0.0.1:${port}: what answers there does not speak ` +
        "PostgreSQL's protocol: check the host and port (is it another service?)"
    : `no PostgreSQL server completed a connection at 127.0.0.1:${port} within ${timeoutS} s: ` +
        'check the host and port (is a PostgreSQL server listening there, and not another service?)';
}

/** A pool to 127.0.0.1:port that the test ends (at once) when it is done. */
function poolTo(port: number, connectTimeoutS: number): Sql {
  const sql = postgres(`postgres://nobody:secret@127.0.0.1:${port}/nothing`, {
    max: 1,
    connect_timeout: connectTimeoutS,
    onnotice: () => undefined,
  }) as unknown as Sql;
  onTestFinished(() => sql.end({ timeout: 0 }));
  return sql;
}

describe('checkConnection', () => {
  test('answers once the server has completed a connection', async () => {
    await expect(checkConnection(db.sql)).resolves.toBeUndefined();
  });

  test(`an HTTP server on the port: SLUICE_CONNECT_TIMEOUT ${postgresJsMajor >= 4 ? 'at once (postgres.js 4 reports the protocol error)' : 'after connect_timeout, while postgres.js kept reconnecting'}`, async () => {
    const http = await listening(createHttpServer((_request, response) => response.end('not PostgreSQL')));
    const sql = poolTo(http.port, 1);
    expect(connectTimeoutMsOf(sql)).toBe(1000);

    const startedAt = performance.now();
    const error = await checkConnection(sql).catch((e: unknown) => e);
    const elapsedMs = performance.now() - startedAt;
    expect(error).toBeInstanceOf(ConnectTimeoutError);
    expect(error).toMatchObject({
      code: 'SLUICE_CONNECT_TIMEOUT',
      address: `127.0.0.1:${http.port}`,
      timeoutMs: 1000,
    });
    expect((error as Error).message).toBe(notPostgres(http.port, 1));
    expect((error as Error).message).not.toContain('secret');
    expect(elapsedMs).toBeLessThan(5_000);
    if (postgresJsMajor >= 4) {
      expect((error as Error).cause).toMatchObject({ code: 'PROTOCOL_ERROR' });
    } else {
      expect(elapsedMs).toBeGreaterThanOrEqual(990);
      // Each attempt was answered and closed, and postgres.js's own timer restarted with the next one.
      expect(http.connections()).toBeGreaterThan(1);
    }
  });

  test('a server that accepts and never answers: bounded by the given timeout', async () => {
    const silent = await listening(createTcpServer(() => undefined));
    const sql = poolTo(silent.port, 30);
    const error = await checkConnection(sql, 300).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConnectTimeoutError);
    expect(silent.connections()).toBe(1);
  });
});

describe('the LISTEN connection', () => {
  test('to a port that is not PostgreSQL: start returns within connect_timeout, logs why, and stop() returns', async () => {
    const http = await listening(createHttpServer((_request, response) => response.end('not PostgreSQL')));
    const warnings: { fields: object; message: string }[] = [];
    const logger: Logger = {
      ...silentLogger,
      warn: (fields, message) => warnings.push({ fields, message }),
    };
    const connected: boolean[] = [];
    const startedAt = performance.now();
    const listener = await startListener({
      sql: poolTo(http.port, 1),
      channel: 'sluice_test',
      ownNonce: 'n',
      applicationName: 'sluice-listen-test',
      logger,
      onWake: () => undefined,
      onConnectedChange: (value) => connected.push(value),
      checkMs: 60_000,
    });
    expect(performance.now() - startedAt).toBeLessThan(5_000);
    expect(warnings[0]?.message).toBe(
      'LISTEN is not connected; polling continues and LISTEN retries with backoff',
    );
    expect((warnings[0]?.fields as { error?: string } | undefined)?.error).toContain(
      `no PostgreSQL server completed a connection at 127.0.0.1:${http.port}`,
    );
    expect(connected).toEqual([]);
    await listener.stop();
  });
});

describe('dispatcher.start()', () => {
  test('to a port that is not PostgreSQL: SLUICE_CONNECT_TIMEOUT within connect_timeout, and stop() returns', async () => {
    const http = await listening(createHttpServer((_request, response) => response.end('not PostgreSQL')));
    const dispatcher = createDispatcher({
      sql: poolTo(http.port, 1),
      consumers: [{ name: 'never', handler: () => undefined }],
      logger: silentLogger,
    });
    const startedAt = performance.now();
    const error = await dispatcher.start().catch((e: unknown) => e);
    expect(performance.now() - startedAt).toBeLessThan(5_000);
    expect(error).toBeInstanceOf(ConnectTimeoutError);
    expect((error as Error).message).toBe(notPostgres(http.port, 1));
    await dispatcher.stop();
  });
});

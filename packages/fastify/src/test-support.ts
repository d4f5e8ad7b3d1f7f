// Shared by this package's database tests (kept out of the build).
import { silentLogger, type Consumer, type Sql } from '@sluice/core';
import { freshSchema } from '@sluice/testing';
import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify';
import { onTestFinished } from 'vitest';
import sluice, { type OpsOptions, type SluicePluginOptions } from './index.js';

export interface TestApp {
  /** Fastify's own options for the host app. */
  readonly server?: FastifyServerOptions;
  /** Runs on the host app before the plugin is registered (its own parsers, an onRoute hook). */
  readonly before?: (app: FastifyInstance) => void;
  /** More plugin options (the dispatcher's). */
  readonly options?: Partial<SluicePluginOptions>;
  /** The fresh schema's prefix. */
  readonly prefix?: string;
}

/**
 * A host app with the plugin on a fresh schema, quiet (no LISTEN, a one-minute poll: only the boot
 * pass and explicit runOnce() calls deliver), ready; closed after the test.
 */
export async function pluginApp(
  sql: Sql,
  consumers: readonly Consumer[],
  ops: OpsOptions,
  host: TestApp = {},
) {
  const schema = await freshSchema(sql, host.prefix ?? 'f');
  const app = Fastify({ logger: false, ...host.server });
  host.before?.(app);
  await app.register(sluice, {
    sql,
    schema,
    consumers,
    listen: false,
    pollIntervalMs: 60_000,
    logger: silentLogger,
    ...host.options,
    ops,
  });
  onTestFinished(() => app.close());
  await app.ready();
  return { app, schema };
}

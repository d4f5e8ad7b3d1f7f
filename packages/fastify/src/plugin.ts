import { createAdmin } from '@sluice/admin';
import {
  append,
  createDispatcher,
  InvalidOptionError,
  migrate as runMigrations,
  transaction,
  type Logger,
} from '@sluice/core';
import {
  ADMIN_DEFAULTS,
  connectTimeoutMsOf,
  logUnprepared,
  neverThrowing,
  openOwnConnections,
  resolveSchemaName,
} from '@sluice/core/internal';
import type { FastifyInstance } from 'fastify';
import { boundedAdmin } from './bounded-admin.js';
import { opsRoutes } from './ops-routes.js';
import { resolveOps, type SluicePluginOptions } from './options.js';
import type { SluiceDecorator } from './type-augmentation.js';

/** What Fastify reads from a registration's options itself (and passes on to the plugin). */
const FASTIFY_REGISTER_OPTIONS: ReadonlySet<string> = new Set(['logLevel', 'logSerializers']);

/** Connections of the operator actions' own pool: actions are rare, the dashboard reads a few at once. */
const ADMIN_CONNECTIONS = 3;

/**
 * Wires a Sluice dispatcher into a Fastify app (docs/design.md §8): decorates `app.sluice`, migrates
 * and starts the dispatcher in onReady, stops it (waiting for running handlers) in onClose, and
 * registers the ops routes when `ops` is given.
 * @throws {InvalidOptionError} at registration, for bad options or ops routes without auth
 */
export async function sluicePlugin(app: FastifyInstance, options: SluicePluginOptions): Promise<void> {
  const { migrate: migrateInput, ops: opsInput, logger: loggerInput, ...rest } = options;
  // A boolean given as null is left out, as every other option's (docs/configuration.md).
  const migrate = migrateInput ?? true;
  // The plugin shares its parent's context (it decorates the app), where Fastify applies no prefix
  // of the registration: the ops routes would be served without it, where a proxy rule for the
  // prefix does not reach. Refused rather than ignored.
  if ((rest as { prefix?: unknown }).prefix !== undefined) {
    throw new InvalidOptionError(
      'prefix',
      "is not applied to the Sluice plugin's routes: give ops.prefix the whole path (ops: { prefix: '/internal/sluice' }), " +
        'or register the plugin inside a prefixed plugin of your own',
    );
  }
  // Fastify's own options of a registration (app.register(sluice, { logLevel, … })) are not Sluice's.
  const dispatcherOptions = Object.fromEntries(
    Object.entries(rest).filter(([key]) => !FASTIFY_REGISTER_OPTIONS.has(key)),
  ) as typeof rest;
  if (typeof migrate !== 'boolean')
    throw new InvalidOptionError('migrate', 'must be true or false (a boolean)');
  const ops = resolveOps(opsInput);
  // Fastify's pino logger has Sluice's logger shape: (fields, message).
  const givenLogger: Logger = loggerInput ?? app.log;
  const schema = resolveSchemaName(dispatcherOptions.schema);
  const dispatcher = createDispatcher({ ...dispatcherOptions, logger: givenLogger });
  // Checked by createDispatcher; the migration's and the connections' reports go through it as the
  // dispatcher's do: a line it throws on is dropped.
  const logger = neverThrowing(givenLogger);
  const lockTimeoutMs = ops?.lockTimeoutMs ?? ADMIN_DEFAULTS.lockTimeoutMs;
  // Operator actions and the migration run on connections Sluice opens itself from the pool's
  // options, as the dispatcher's turns do (docs/design.md §4.11): no array-type fetch at connect
  // (on postgres.js 3.4.9 a backend killed during it stops the process), a pool replaced when one
  // of its connections dies, and a startup bounded by connect_timeout. The application's pool
  // stays the source of those options and the pool of its own transactions.
  const adminConnections = openOwnConnections(dispatcherOptions.sql, {
    max: ADMIN_CONNECTIONS,
    applicationName: `sluice-admin${dispatcherOptions.instanceId === undefined ? '' : `:${dispatcherOptions.instanceId}`}`,
    // An action waits at most lockTimeoutMs for a row; its statements are short.
    retireAfterMs: lockTimeoutMs + 30_000,
    onUnprepared: (error) => {
      logUnprepared(logger, error);
    },
  });
  // The admin judges re-arms as this dispatcher does: with its options, else the same defaults.
  const admin = createAdmin({
    sql: adminConnections.sql,
    schema,
    lockTimeoutMs,
    rearmCooldownMs: dispatcherOptions.rearmCooldownMs ?? ADMIN_DEFAULTS.rearmCooldownMs,
    maxRearmCount: dispatcherOptions.maxRearmCount ?? ADMIN_DEFAULTS.maxRearmCount,
  });

  const decorator: SluiceDecorator = {
    dispatcher,
    admin,
    schema,
    append: (tx, events, appendOptions = {}) => append(tx, events, { ...appendOptions, schema }),
    transaction: (fn) => transaction(dispatcherOptions.sql, fn),
  };
  app.decorate('sluice', decorator);

  /** onReady's work while it runs; onClose waits for it. */
  let readying: Promise<void> | undefined;
  let closing = false;
  app.addHook('onReady', async () => {
    // A close() called in the same tick as ready() may run its onClose first: nothing to start.
    if (closing) return;
    readying = ready();
    await readying;
  });
  const ready = async () => {
    // Against a port where something other than PostgreSQL answers, the migration's first
    // statement would wait for ever: fail with SLUICE_CONNECT_TIMEOUT after connect_timeout, or
    // sooner when Fastify would give up on this hook first (its pluginTimeout, 10 s by default,
    // against postgres.js's 30 s), with a message that names neither the plugin nor the database.
    const pluginTimeoutMs = app.initialConfig.pluginTimeout ?? 0;
    const timeoutMs = Math.min(
      connectTimeoutMsOf(dispatcherOptions.sql),
      pluginTimeoutMs > 0 ? Math.floor(pluginTimeoutMs * 0.8) : Infinity,
    );
    await adminConnections.checkConnection(timeoutMs);
    if (migrate) await runMigrations(adminConnections.sql, { schema, logger });
    await dispatcher.start();
  };
  app.addHook('onClose', async () => {
    closing = true;
    // A ready() under way (its migration, the dispatcher's start) ends first: then it is stopped.
    await readying?.catch(() => undefined);
    await dispatcher.stop();
    await adminConnections.end();
  });

  if (ops) {
    if (ops.insecure) {
      // Also a process warning: with Fastify's default `logger: false` app.log drops everything.
      process.emitWarning(
        `Sluice ops routes under ${ops.prefix} are open without authentication (ops.insecure): local development only`,
        { code: 'SLUICE_OPS_INSECURE' },
      );
      app.log.warn(
        { prefix: ops.prefix },
        'SLUICE OPS ROUTES ARE OPEN WITHOUT AUTHENTICATION (ops.insecure): anyone who can reach this server can ' +
          'restart consumers and skip events. Use this for local development only.',
      );
    }
    await app.register(opsRoutes, {
      prefix: ops.prefix,
      admin: boundedAdmin(admin, ops.requestTimeoutMs, logger, adminConnections),
      dispatcher,
      ops,
      // Not once the app is closing, nor once it stopped the dispatcher itself
      // (app.sluice.dispatcher.stop()).
      isRunning: () => !closing && dispatcher.running,
      listenExpected: dispatcherOptions.listen !== false,
      writeSlots: ADMIN_CONNECTIONS - 1,
    });
  }
}

import { context, ROOT_CONTEXT } from '@opentelemetry/api';
import { DispatcherNotRegisteredError, DispatcherStoppedError, messageOf, notMigratedOr } from '../errors.js';
import { checkConnection } from '../connect-timeout.js';
import { logUnprepared, openOwnConnections, preparingSwitch } from '../connections/own-connections.js';
import { TurnConnections } from './slots.js';
import type { Consumer } from '../consumers/consumer.js';
import { resolveOptions, type DispatcherOptions, type ResolvedConsumer } from '../options.js';
import type { Sql } from '../sql-types.js';
import { registerConsumers } from '../queries/consumers.js';
import { laneCountsOf, requestLaneChange } from '../queries/lanes.js';
import { RUNNING_STATES, type VersionRow } from '../queries/versions.js';
import { laneInstanceIds, laneKeyText } from '../lanes/lanes.js';
import { tables } from '../schema/tables.js';
import { refuseSessionSettings, verifySchema } from '../schema/verify-schema.js';
import { createMetrics } from '../telemetry/metrics.js';
import { createTracer } from '../telemetry/tracing.js';
import { wakeUpChannel } from '../wake-up/channel.js';
import { wakeUpNotifierFor } from '../wake-up/wake-up-notifier.js';
import { PassRunner, PassScheduler, type PassResult } from './pass.js';
import { startListener, type Listener } from './wake-up.js';
import { settleWithin, TIMED_OUT } from '../time-limit.js';

export interface Dispatcher {
  /**
   * Registers every consumer's row, starts the poll timer and LISTEN. Idempotent.
   * @throws {ConnectTimeoutError} when no PostgreSQL server completed a connection within the
   *   pool's `connect_timeout` (something else answers on that port, or nothing does)
   * @throws {PostgresUnsupportedError} when the pool's sessions write times in a DateStyle other
   *   than ISO, or have array_nulls off (also from ensureRegistered())
   */
  start(): Promise<void>;
  /**
   * Stops both, waits for every in-flight pass and turn, and closes the dispatcher's own
   * connections: the application's pool can be closed then. Idempotent.
   */
  stop(): Promise<void>;
  /**
   * Runs one pass now: the idle pre-check, then one turn for each consumer that may have work. A
   * consumer whose turn is already running is not started twice: the running turns take one more
   * turn, and this call awaits them; every turn it awaits last fetched after the call.
   * @throws {DispatcherNotRegisteredError} before start() or ensureRegistered()
   * @throws {DispatcherStoppedError} once stop() was called
   */
  runOnce(): Promise<PassResult>;
  /** Waits for in-flight passes and turns without stopping. */
  drain(): Promise<void>;
  /**
   * (Re-)creates missing consumer rows, e.g. after a test truncated them. Never moves a cursor.
   * @throws {DispatcherStoppedError} once stop() was called
   */
  ensureRegistered(): Promise<void>;
  readonly consumers: readonly Consumer[];
  /**
   * The application's pool it was given (operators' tools and test helpers reuse it). The
   * dispatcher itself runs on connections of its own, opened from that pool's options.
   */
  readonly sql: Sql;
  /** The Sluice schema it dispatches from. */
  readonly schema: string;
  /** Whether LISTEN is connected right now (false when listen is off or before start()). */
  readonly listenConnected: boolean;
  /** Whether it dispatches: start() has succeeded and stop() has not been called. */
  readonly running: boolean;
}

/**
 * Creates a dispatcher for `consumers` (docs/design.md §4). Options are validated here, once.
 * @throws {InvalidOptionError} naming the offending option
 */
export function createDispatcher(input: DispatcherOptions): Dispatcher {
  const options = resolveOptions(input);
  const { logger } = options;
  // The application's pool: its connection options, and the key of the in-process wake-ups of
  // transaction(). Everything the dispatcher runs goes through connections of its own, opened from
  // those options (connections/own-connections.ts): one per turn, one to record turn starts and one
  // for pre-checks and read-aheads.
  const appSql = options.sql;
  // One switch for all of them: once a pool learns that prepared statements do not survive (a
  // transaction pooler), every pool of the dispatcher continues without.
  const preparing = preparingSwitch((appSql.options as { prepare?: boolean }).prepare !== false);
  const own = openOwnConnections(appSql, {
    preparing,
    max: 2,
    applicationName: `sluice${options.instanceId === undefined ? '' : `:${options.instanceId}`}`,
    retireAfterMs: options.handlerTimeoutMs + options.statementTimeoutMs,
    onUnprepared: (error) => {
      logUnprepared(logger, error);
    },
  });
  const sql = own.sql;
  // Turns run on pools of their own, one connection each, whose BEGIN goes out with the turn's
  // first statements (docs/design.md §4.3); the pool above serves pre-checks, turn starts,
  // read-aheads and bookkeeping.
  const turnConnections = new TurnConnections(() =>
    openOwnConnections(appSql, {
      preparing,
      max: 1,
      applicationName: `sluice${options.instanceId === undefined ? '' : `:${options.instanceId}`}`,
      retireAfterMs: options.handlerTimeoutMs + options.statementTimeoutMs,
      onUnprepared: (error) => {
        logUnprepared(logger, error);
      },
      pipelinedTransactions: true,
    }),
  );
  const t = tables(sql, options.schema);
  const metrics = createMetrics(options.meterProvider, options.schema);
  const tracer = createTracer(options.tracerProvider);
  const notifier = wakeUpNotifierFor(appSql, options.schema, { logger });
  /** Who asks for what this dispatcher asks for (a change of lanes), in the audit. */
  const actor = `sluice-dispatcher${options.instanceId === undefined ? '' : `:${options.instanceId}`}`;

  let registered = false;
  let started = false;
  let stopping = false;
  /** The cluster's identifier, read once at registration; null when it cannot be read. */
  let systemIdentifier: string | null | undefined;
  let pollTimer: NodeJS.Timeout | undefined;
  let listener: Listener | undefined;
  let listenConnected = false;
  let unsubscribe: (() => void) | undefined;
  let starting: Promise<void> | undefined;
  let stoppingPromise: Promise<void> | undefined;
  /**
   * From the moment stop() is called (it may first wait for start() to end): no handler is
   * handed an event after that, even by a turn already running.
   */
  const stopAsked = () => stopping || stoppingPromise !== undefined;
  const passes = new PassRunner({
    options: { ...options, sql },
    turnConnections,
    tables: t,
    metrics,
    tracer,
    logger,
    systemIdentifier: () => systemIdentifier ?? null,
    isStopping: stopAsked,
    listenerSnapshot: () => listener?.snapshot(),
    own,
  });

  const scheduler = new PassScheduler(
    (wake) => passes.run('launch', wake),
    () => started && !stopAsked(),
    logger,
  );

  // A transactional consumer's handlers run on Sluice's own pool (ctx.tx), which uses the array
  // types the application's pool fetched on its first connection (connections/own-connections.ts):
  // make sure it has, once, before the first turn.
  let arrayTypes: Promise<void> | undefined;
  const needsArrayTypes =
    options.consumers.some((c) => c.transactional) &&
    (appSql.options as { fetch_types?: boolean }).fetch_types !== false;

  async function ensureRegistered(): Promise<void> {
    if (stopping) throw new DispatcherStoppedError();
    if (needsArrayTypes) {
      arrayTypes ??= checkConnection(appSql).catch((error: unknown) => {
        arrayTypes = undefined;
        throw error;
      });
      await arrayTypes;
    }
    if (systemIdentifier === undefined) await refuseSessionSettings(sql);
    systemIdentifier ??= await readSystemIdentifier();
    /** Where a consumer was declared, for the option a refusal names. */
    const declaredAt = (c: ResolvedConsumer) => `consumers[${options.consumers.indexOf(c)}]`;
    const rowsOf = (c: ResolvedConsumer, startAt?: bigint) => {
      const at = declaredAt(c);
      return (c.lane === null ? [c.instanceId] : laneInstanceIds(c.lanes)).map((instanceId) => ({
        name: c.name,
        instanceId,
        startFrom: c.startFrom,
        perInstance: c.lane === null,
        version: c.version,
        ...(startAt === undefined ? {} : { startAt }),
        ...(c.lane === null
          ? {}
          : {
              laneKey: { text: laneKeyText(c.laneKey), option: `${at}.laneKey` },
              ...(c.parkKey ? {} : { notParking: { option: `${at}.errorPolicy.parkKey` } }),
            }),
      }));
    };
    let versions = new Map<string, VersionRow[]>();
    const { families, prunedBehind } = await registerConsumers(
      sql,
      t,
      options.schema,
      options.consumers.flatMap((c) => rowsOf(c)),
      {
        declared: options.consumers.flatMap((c) =>
          c.version === null
            ? []
            : [
                {
                  name: c.baseName,
                  version: c.version,
                  rowName: c.name,
                  sideEffects: c.sideEffects,
                  startPosition: c.rebuildFrom,
                  takeoverWithin: c.takeoverWithin,
                  view: c.liveView,
                  option: declaredAt(c),
                },
              ],
        ),
        actor,
        // A version's rows are registered while it runs here: live, or rebuilding from where it
        // starts (docs/design.md §12.1).
        filter: (recorded) => {
          versions = recorded;
          return options.consumers.flatMap((c) => {
            if (c.version === null) return rowsOf(c);
            const v = recorded.get(c.baseName)?.find((x) => x.version === c.version);
            if (v && v.rowName !== c.name) {
              logger.error(
                { consumer: c.baseName, version: c.version, recorded: v.rowName, declared: c.name },
                'this version was recorded with other rows than this process declares (its sideEffects ' +
                  'differ from the process that declared it first): this process does not run it',
              );
              return [];
            }
            if (!v) {
              // Declared below a version already recorded, it was not registered (docs/design.md §12.1).
              const newest = Math.max(...(recorded.get(c.baseName) ?? []).map((x) => x.version));
              logger.warn(
                { consumer: c.baseName, version: c.version, newest },
                'this version is below a newer one already recorded and was never registered: a version ' +
                  'below one taken over, given up or on its way is not run again. This process does not run ' +
                  'it; deploy the newest version to serve the consumer here',
              );
              return [];
            }
            // A version with side effects waiting to take the rows over registers none, but is
            // refused now when it keeps them by another key than theirs (docs/design.md §11.1).
            if (v.state === 'waiting' && c.sideEffects)
              return rowsOf(c).map((r) => ({ ...r, keyCheckOnly: true }));
            if (!RUNNING_STATES.has(v.state) && v.state !== 'paused') return [];
            return rowsOf(c, v.state === 'live' ? undefined : v.startPosition);
          });
        },
      },
    ).catch((error: unknown) => {
      // The schema's tables are missing (never migrated, or migrated concurrently): said as start() says it.
      throw notMigratedOr(error, options.schema);
    });
    passes.versions.set(versions);
    for (const row of prunedBehind) {
      const lost = [
        row.cursor < row.prunedThrough ? `ids ${row.cursor + 1n} to ${row.prunedThrough}` : null,
        row.pendingFrom === null
          ? null
          : `the ids from ${row.pendingFrom} to ${row.prunedThrough} it was still waiting for (written by transactions in flight when it passed them)`,
        row.stragglers
          ? `the events up to ${row.prunedThrough} that were in flight at its 'now' registration`
          : null,
      ].filter((part) => part !== null);
      logger.error(
        {
          consumer: row.name,
          instanceId: row.instanceId,
          cursor: row.cursor,
          prunedThrough: row.prunedThrough,
          pendingFrom: row.pendingFrom,
          stragglers: row.stragglers,
        },
        'retention pruned events this per-instance consumer had not received while its process was away ' +
          `(prune passed its row over as stale): ${lost.join('; ')} are not delivered to it`,
      );
    }
    // A consumer registered with another lane count: change it to the configured one (nothing is
    // lost and order per key is kept: docs/design.md §11.3).
    for (const c of options.consumers) {
      if (c.lane === null || !passes.versions.runs(c)) continue;
      const counts = laneCountsOf(families.get(c.name) ?? []);
      if (counts.length === 1 && counts[0] === c.lanes) continue;
      try {
        const change = await requestLaneChange(sql, t, options.schema, c.name, c.lanes, actor);
        if (change.outcome !== 'unchanged') {
          logger.warn(
            {
              consumer: c.name,
              from: change.from,
              to: c.lanes,
              barrier: change.barrier,
              outcome: change.outcome,
            },
            'the consumer is registered with another lane count: changing it to the configured one',
          );
        }
      } catch (error) {
        logger.warn(
          { consumer: c.name, lanes: c.lanes, error: messageOf(error) },
          'the consumer is registered with another lane count and could not be changed now; its rows keep their lanes',
        );
      }
    }
    registered = true;
  }

  async function doStart(): Promise<void> {
    // Bounded through PostgreSQL's whole startup: against a port where something else answers,
    // start() would otherwise wait for ever (docs/operating.md#cli).
    await own.checkConnection();
    const verification = await verifySchema(sql, { schema: options.schema });
    for (const warning of verification.warnings) logger.warn({ schema: options.schema }, warning);
    await ensureRegistered();
    started = true;
    unsubscribe = notifier.subscribe(() => {
      scheduler.request(true, true);
    });
    pollTimer = setInterval(() => {
      scheduler.request(false);
    }, options.pollIntervalMs);
    if (options.listen) {
      listener = await startListener({
        sql: options.listenSql ?? appSql,
        probe: (payload) => sql`select pg_notify(${wakeUpChannel(options.schema)}, ${payload})`,
        channel: wakeUpChannel(options.schema),
        ownNonce: notifier.nonce,
        applicationName:
          `sluice-listen${options.instanceId === undefined ? '' : `:${options.instanceId}`}`.slice(0, 63),
        logger,
        checkMs: options.listenCheckMs,
        onWake: () => {
          scheduler.request(true);
        },
        onConnectedChange: (connected) => {
          listenConnected = connected;
          metrics.setListenConnected(connected);
        },
      });
    }
    scheduler.request(false);
  }

  async function readSystemIdentifier(): Promise<string | null> {
    try {
      const [row] = await sql<
        { id: string }[]
      >`select system_identifier::text as id from pg_control_system()`;
      return row?.id ?? null;
    } catch (error) {
      logger.info(
        { error: messageOf(error) },
        'cannot read pg_control_system(); a restore onto another cluster will not be detected',
      );
      return null;
    }
  }

  async function doStop(): Promise<void> {
    stopping = true;
    clearInterval(pollTimer);
    unsubscribe?.();
    await listener?.stop();
    listener = undefined;
    // A turn in flight finishes its running handler call and writes what it did: within its
    // handler's time and a statement's. A statement that gets no answer at all (queued in a
    // pooler while the server is down, a connection gone silent) is not bounded by the server's
    // statement_timeout: past that time, the dispatcher's own connections are ended under it.
    const drained = drain().catch(() => undefined);
    const bound = Math.max(...options.consumers.map((c) => c.handlerTimeoutMs)) + options.statementTimeoutMs;
    if ((await settleWithin(drained, bound)) === TIMED_OUT) {
      logger.warn(
        { waitedMs: bound },
        "stop(): a turn still waits for the database after its handler's and a statement's time; " +
          "ending the dispatcher's connections under it (what it did is rolled back and delivered again)",
      );
      await Promise.all([own.end(), turnConnections.end()]);
      await settleWithin(drained, options.statementTimeoutMs);
    }
    await Promise.all([own.end(), turnConnections.end()]);
  }

  async function drain(): Promise<void> {
    await scheduler.drain();
    await passes.idle();
  }

  return {
    consumers: options.consumers.map((c) => c.definition),
    sql: appSql,
    schema: options.schema,
    get listenConnected() {
      return listenConnected;
    },
    get running() {
      return started && !stopAsked();
    },
    start() {
      if (stopAsked()) return Promise.reject(new DispatcherStoppedError());
      starting ??= doStart().catch((error: unknown) => {
        starting = undefined;
        // Refused (a schema not migrated, a setting Sluice cannot run with…): the connections it
        // opened to find out are closed, so that a process that gives up can exit. A later start()
        // opens them again.
        if (!started) own.cut();
        throw error;
      });
      return starting;
    },
    stop() {
      stoppingPromise ??= (async () => {
        if (starting) await starting.catch(() => undefined);
        await doStop();
      })();
      return stoppingPromise;
    },
    async runOnce() {
      if (stopAsked()) throw new DispatcherStoppedError();
      if (!registered) throw new DispatcherNotRegisteredError();
      return scheduler.track(context.with(ROOT_CONTEXT, () => passes.run('await')));
    },
    drain,
    // Refused from the moment stop() is called, also while it first waits for start() to end.
    ensureRegistered: () => (stopAsked() ? Promise.reject(new DispatcherStoppedError()) : ensureRegistered()),
  };
}

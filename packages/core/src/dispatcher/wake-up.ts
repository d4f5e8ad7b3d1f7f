import { randomBytes } from 'node:crypto';
import postgres from 'postgres';
import { withinConnectTimeout } from '../connect-timeout.js';
import { ConnectTimeoutError, messageOf } from '../errors.js';
import type { Logger } from '../logger.js';
import { currentSnapshot } from '../queries/consumers.js';
import type { Sql } from '../sql-types.js';
import { settleWithin, TIMED_OUT } from '../time-limit.js';

export interface Listener {
  /**
   * The cluster's current snapshot, asked on the LISTEN connection; undefined while it is not
   * connected or has not answered the previous question. An idle tick asks here rather than on the
   * pool: one dedicated backend answers every tick, instead of each pooled backend in turn, woken
   * once a second or so and then flushing its statistics as well.
   */
  snapshot(): Promise<string> | undefined;
  stop(): Promise<void>;
}

export interface ListenerOptions {
  readonly sql: Sql;
  readonly channel: string;
  /** Payload of this process's own notifications: it was woken directly, ignore them. */
  readonly ownNonce: string;
  readonly applicationName: string;
  readonly logger: Logger;
  /** A notification arrived, or LISTEN (re)connected and a catch-up pass is due. */
  readonly onWake: () => void;
  readonly onConnectedChange: (connected: boolean) => void;
  /** A `select 1` is sent on the LISTEN connection this often; unanswered by the next one: reconnect. */
  readonly checkMs: number;
  /**
   * Sends a notification with `payload` on the channel the way wake-ups travel (through the
   * pool): after each LISTEN, the listener checks that such a notification reaches it.
   */
  readonly probe?: (payload: string) => Promise<unknown>;
}

/** Payloads of the listeners' own probes: never a wake-up, whoever sent them. */
const PROBE_PREFIX = 'sluice-probe:';
/**
 * LISTEN is taken as working once PROBES_NEEDED probes sent through the pool have each been heard
 * within PROBE_WAIT_MS, and as deaf at the PROBE_MISSES_ALLOWED + 1st miss. Behind a transaction
 * pooler a probe is still heard now and then (when it reaches the server connection the LISTEN ran
 * on while that connection is serving the listener), so one heard probe proves nothing; on a
 * connection of its own every probe arrives, and one slow one is forgiven.
 */
const PROBE_WAIT_MS = 2_000;
const PROBES_NEEDED = 5;
const PROBE_MISSES_ALLOWED = 1;

const RECONNECT_INITIAL_MS = 100;
const RECONNECT_MAX_MS = 5_000;

/**
 * LISTENs on the Sluice channel on one dedicated connection (a single-connection postgres.js
 * instance built from the pool's options). Owning that connection lets us see it close: the
 * LISTEN-connected gauge drops at once, the listener reconnects with backoff, and every
 * (re)connect triggers a catch-up pass, since notifications sent meanwhile are lost (docs/design.md §4.8).
 * A socket can also die without closing (a silent network drop, a crashed NAT entry): a
 * `select 1` every `checkMs` that is still unanswered at the next check counts as a closed
 * connection. Polling keeps delivering throughout. A payload is only ever a hint (F5): any of them
 * causes at most one coalesced pass.
 */
export async function startListener(options: ListenerOptions): Promise<Listener> {
  let stopped = false;
  let connected = false;
  let retryMs = RECONNECT_INITIAL_MS;
  let retryTimer: NodeJS.Timeout | undefined;
  let failing = false;
  let checkPending = false;
  let snapshotPending = false;
  /** LISTEN cannot receive notifications here (a transaction pooler): given up, polling only. */
  let deaf = false;
  let probeWaiter: { payload: string; heard: () => void } | undefined;

  const setConnected = (value: boolean) => {
    if (connected === value) return;
    connected = value;
    options.onConnectedChange(value);
  };

  const open = () => {
    // `onnotify` is the hook postgres.js' own listen() uses; it is not in the published types.
    const listenOptions = {
      ...options.sql.options,
      // A fresh state of the driver's own (retry counter, array type map), not the pool's.
      shared: { retries: 0, typeArrayMap: {} },
      max: 1,
      idle_timeout: null,
      max_lifetime: null,
      fetch_types: false,
      onnotice: () => undefined,
      connection: { ...options.sql.options.connection, application_name: options.applicationName },
      onnotify: (channel: string, payload: string) => {
        if (channel !== options.channel) return;
        if (payload.startsWith(PROBE_PREFIX)) {
          if (probeWaiter?.payload === payload) probeWaiter.heard();
          return;
        }
        if (payload !== options.ownNonce) options.onWake();
      },
      onclose: () => {
        if (instance !== listenSql) return; // an instance given up after a failed check
        setConnected(false);
        if (stopped || deaf) return;
        // LISTEN again on a fresh instance: postgres.js 3.4.9 may leave a connection that closed
        // with a write pending unable to send anything again (see connections/own-connections.ts).
        listenSql = open();
        snapshotPending = false;
        checkPending = false;
        void instance.end({ timeout: 0 }).catch(() => undefined);
        schedule();
      },
    };
    const instance = postgres(
      listenOptions as unknown as postgres.Options<Record<string, postgres.PostgresType>>,
    );
    return instance;
  };
  let listenSql = open();

  async function connect(): Promise<void> {
    const attempt = listenSql;
    try {
      // Bounded through the whole handshake: a peer that is not PostgreSQL would otherwise keep
      // this instance reconnecting, and start() waiting, for ever.
      await withinConnectTimeout(attempt, attempt`listen ${attempt(options.channel)}`);
      if (stopped) return;

      retryMs = RECONNECT_INITIAL_MS;
      checkPending = false;
      if (failing) options.logger.info({ channel: options.channel }, 'LISTEN reconnected');
      failing = false;
      setConnected(true);
      options.onWake();
      if (options.probe) void verifyHearing(attempt, options.probe);
    } catch (error) {
      if (stopped) return;
      if (error instanceof ConnectTimeoutError && attempt === listenSql) {
        // That instance would go on reconnecting by itself: end it and retry on a fresh one.
        listenSql = open();
        void attempt.end({ timeout: 0 }).catch(() => undefined);
      }
      if (!failing) {
        options.logger.warn(
          { channel: options.channel, error: messageOf(error) },
          'LISTEN is not connected; polling continues and LISTEN retries with backoff',
        );
      }
      failing = true;
      schedule();
    }
  }

  /**
   * After a LISTEN: checks that notifications reach this connection. Behind a transaction pooler
   * (PgBouncer's pool_mode=transaction) LISTEN succeeds, but the server connection it ran on goes
   * back to the pool, and notifications never arrive: then the listener gives up, once, and says so.
   */
  async function verifyHearing(attempt: Sql, probe: (payload: string) => Promise<unknown>): Promise<void> {
    if (await heardProbe(probe)) return;
    if (stopped || attempt !== listenSql) return;
    deaf = true;
    setConnected(false);
    options.logger.warn(
      { channel: options.channel },
      'LISTEN does not receive notifications on its connection (behind a transaction pooler such ' +
        'as PgBouncer?): wake-ups fall back to polling every pollIntervalMs; give the dispatcher ' +
        'listenSql, a pool connected to PostgreSQL directly (docs/operating.md, Behind a pooler)',
    );
    await attempt.end({ timeout: 0 }).catch(() => undefined);
  }

  /** Whether probe notifications sent through the pool reach this connection (see PROBES_NEEDED). */
  async function heardProbe(probe: (payload: string) => Promise<unknown>): Promise<boolean> {
    let heardCount = 0;
    let missed = 0;
    while (heardCount < PROBES_NEEDED && !stopped) {
      const payload = `${PROBE_PREFIX}${randomBytes(9).toString('base64url')}`;
      let heard: () => void = () => undefined;
      const arrived = new Promise<void>((resolve) => {
        heard = resolve;
      });
      probeWaiter = { payload, heard };
      try {
        await probe(payload);
        if ((await settleWithin(arrived, PROBE_WAIT_MS)) !== TIMED_OUT) heardCount += 1;
        else if (++missed > PROBE_MISSES_ALLOWED) return false;
      } catch (error) {
        options.logger.warn(
          { channel: options.channel, error: messageOf(error) },
          'could not send the LISTEN probe; LISTEN is taken as working',
        );
        return true;
      } finally {
        probeWaiter = undefined;
      }
    }
    return true;
  }

  function schedule(): void {
    if (retryTimer || stopped || deaf) return;
    retryTimer = setTimeout(() => {
      retryTimer = undefined;
      void connect();
    }, retryMs);
    retryMs = Math.min(RECONNECT_MAX_MS, retryMs * 2);
  }

  /** The previous check is still unanswered: the socket is dead. Drop it and LISTEN again. */
  function giveUp(): void {
    options.logger.warn(
      { channel: options.channel, checkMs: options.checkMs },
      `the LISTEN connection did not answer a check within ${options.checkMs} ms; ` +
        'reconnecting (polling continues)',
    );
    const dead = listenSql;
    listenSql = open();
    checkPending = false;
    snapshotPending = false;
    failing = true;
    setConnected(false);
    void dead.end({ timeout: 0 }).catch(() => undefined);
    schedule();
  }

  function check(): void {
    if (stopped || deaf || !connected) return;
    if (checkPending) {
      giveUp();
      return;
    }
    checkPending = true;
    const checked = listenSql;
    const answered = () => {
      if (checked === listenSql) checkPending = false;
    };
    // A rejection means the connection closed: onclose reconnects.
    checked`select 1`.then(answered, answered);
  }
  const checkTimer = setInterval(check, options.checkMs);
  checkTimer.unref();

  await connect();
  return {
    snapshot() {
      if (stopped || !connected || snapshotPending) return undefined;
      snapshotPending = true;
      const asked = listenSql;
      return currentSnapshot(asked).finally(() => {
        if (asked === listenSql) snapshotPending = false;
      });
    },
    async stop() {
      stopped = true;
      clearTimeout(retryTimer);
      clearInterval(checkTimer);
      await listenSql.end({ timeout: 1 });
      setConnected(false);
    },
  };
}

import postgres from 'postgres';
import { withinConnectTimeout } from '../connect-timeout.js';
import { ConnectTimeoutError, messageOf } from '../errors.js';
import type { Logger } from '../logger.js';
import { currentSnapshot } from '../queries/consumers.js';
import type { Sql } from '../sql-types.js';
import { PROBE_PREFIX, ProbeEar, REPROBE_INITIAL_MS, REPROBE_MAX_MS } from './listen-probe.js';

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
  /** The first wait before a listener found deaf probes again, doubling. @defaultValue 30 s */
  readonly reprobeInitialMs?: number;
  /** The longest wait between such probes. @defaultValue 5 min */
  readonly reprobeMaxMs?: number;
}

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
  /**
   * LISTEN did not receive the probes (a transaction pooler, or a server too loaded to deliver
   * them in time): polling only, and the probes are tried again now and then (reprobe).
   */
  let deaf = false;
  const reprobeInitialMs = options.reprobeInitialMs ?? REPROBE_INITIAL_MS;
  const reprobeMaxMs = options.reprobeMaxMs ?? REPROBE_MAX_MS;
  let reprobeMs = reprobeInitialMs;
  let reprobeTimer: NodeJS.Timeout | undefined;
  /** A probe could not be sent, and that was said; said again only after a probe was sent. */
  let unsentReported = false;
  let verifications = 0;
  const ear = new ProbeEar();

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
          ear.arrived(payload);
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
      // A probe of the connection before it (scheduled after one could not be sent) is moot now.
      clearTimeout(reprobeTimer);
      reprobeTimer = undefined;
      if (failing) options.logger.info({ channel: options.channel }, 'LISTEN reconnected');
      failing = false;
      if (deaf && options.probe) {
        // Probing again after LISTEN was found deaf: connected only once the probes are heard.
        void verifyHearing(attempt, options.probe);
        return;
      }
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
      if (deaf) scheduleReprobe();
      else schedule();
    }
  }

  /**
   * After a LISTEN: checks that notifications sent through the pool reach this connection
   * (dispatcher/listen-probe.ts). When they do not, the listener falls back to polling and says
   * so, once; it probes again after a backoff, and says once when wake-ups are back.
   */
  async function verifyHearing(attempt: Sql, probe: (payload: string) => Promise<unknown>): Promise<void> {
    // One verification at a time: a later one (a reconnect's) ends an earlier one's probing.
    const run = ++verifications;
    const hearing = await ear.listen(probe, () => stopped || run !== verifications);
    if (stopped || attempt !== listenSql || run !== verifications) return;
    if (hearing.outcome === 'unsent' && !deaf) {
      // Not known either way: taken as working (it was before the probe), and probed again later,
      // so that a listener behind a transaction pooler does not pass for one that hears.
      if (!unsentReported) {
        options.logger.warn(
          { channel: options.channel, error: messageOf(hearing.error) },
          'could not send the LISTEN probe; LISTEN is taken as working until a later probe says otherwise',
        );
      }
      unsentReported = true;
      scheduleReprobe(() => {
        if (attempt === listenSql) void verifyHearing(attempt, probe);
      });
      return;
    }
    unsentReported = false;
    if (hearing.outcome === 'heard') {
      reprobeMs = reprobeInitialMs;
      if (deaf) {
        deaf = false;
        options.logger.info(
          { channel: options.channel },
          'LISTEN receives notifications again: wake-ups are back',
        );
        setConnected(true);
        options.onWake();
      }
      return;
    }
    if (!deaf) {
      reprobeMs = reprobeInitialMs; // not the backoff of probes that could not be sent
      options.logger.warn(
        { channel: options.channel },
        'LISTEN does not receive notifications on its connection (behind a transaction pooler such ' +
          'as PgBouncer?): wake-ups fall back to polling every pollIntervalMs, and LISTEN is probed ' +
          'again every few minutes; give the dispatcher listenSql, a pool connected to PostgreSQL ' +
          'directly (docs/operating.md, Behind a pooler)',
      );
    }
    deaf = true;
    setConnected(false);
    // The next probe LISTENs on a fresh instance; this one's close is not a reconnect (onclose).
    listenSql = open();
    checkPending = false;
    snapshotPending = false;
    await attempt.end({ timeout: 0 }).catch(() => undefined);
    scheduleReprobe();
  }

  /** After a backoff: LISTEN on a fresh connection and probe it, or `again` when given. */
  function scheduleReprobe(again?: () => void): void {
    if (reprobeTimer || stopped) return;
    reprobeTimer = setTimeout(() => {
      reprobeTimer = undefined;
      if (stopped) return;
      if (again) again();
      else void connect();
    }, reprobeMs);
    reprobeMs = Math.min(reprobeMaxMs, reprobeMs * 2);
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
      clearTimeout(reprobeTimer);
      clearInterval(checkTimer);
      await listenSql.end({ timeout: 1 });
      setConnected(false);
    },
  };
}

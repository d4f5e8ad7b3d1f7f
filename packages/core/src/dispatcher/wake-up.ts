import postgres from 'postgres';
import { messageOf } from '../errors.js';
import type { Logger } from '../logger.js';
import type { Sql } from '../sql-types.js';

export interface Listener {
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
}

const RECONNECT_INITIAL_MS = 100;
const RECONNECT_MAX_MS = 5_000;

/**
 * LISTENs on the Sluice channel on one dedicated connection (a single-connection postgres.js
 * instance built from the pool's options). Owning that connection lets us see it close: the
 * LISTEN-connected gauge drops at once, the listener reconnects with backoff, and every
 * (re)connect triggers a catch-up pass, since notifications sent meanwhile are lost (DESIGN §4).
 * Polling keeps delivering throughout. A payload is only ever a hint (F5): any of them causes at
 * most one coalesced pass.
 */
export async function startListener(options: ListenerOptions): Promise<Listener> {
  let stopped = false;
  let connected = false;
  let retryMs = RECONNECT_INITIAL_MS;
  let retryTimer: NodeJS.Timeout | undefined;
  let failing = false;

  const setConnected = (value: boolean) => {
    if (connected === value) return;
    connected = value;
    options.onConnectedChange(value);
  };

  // `onnotify` is the hook postgres.js' own listen() uses; it is not in the published types.
  const listenOptions = {
    ...options.sql.options,
    max: 1,
    idle_timeout: null,
    max_lifetime: null,
    fetch_types: false,
    onnotice: () => undefined,
    connection: { ...options.sql.options.connection, application_name: options.applicationName },
    onnotify: (channel: string, payload: string) => {
      if (channel === options.channel && payload !== options.ownNonce) options.onWake();
    },
    onclose: () => {
      setConnected(false);
      if (!stopped) schedule();
    },
  };
  const listenSql = postgres(
    listenOptions as unknown as postgres.Options<Record<string, postgres.PostgresType>>,
  );

  async function connect(): Promise<void> {
    try {
      await listenSql`listen ${listenSql(options.channel)}`;
      if (stopped) return;
      retryMs = RECONNECT_INITIAL_MS;
      if (failing) options.logger.info({ channel: options.channel }, 'LISTEN reconnected');
      failing = false;
      setConnected(true);
      options.onWake();
    } catch (error) {
      if (stopped) return;
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

  function schedule(): void {
    if (retryTimer || stopped) return;
    retryTimer = setTimeout(() => {
      retryTimer = undefined;
      void connect();
    }, retryMs);
    retryMs = Math.min(RECONNECT_MAX_MS, retryMs * 2);
  }

  await connect();
  return {
    async stop() {
      stopped = true;
      clearTimeout(retryTimer);
      await listenSql.end({ timeout: 1 });
      setConnected(false);
    },
  };
}

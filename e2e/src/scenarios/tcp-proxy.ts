// A small TCP proxy in front of PostgreSQL (the pg-boss halfOpenProxy pattern) that can blackhole
// chosen connections: stop forwarding bytes in both directions without closing either socket, as
// a middlebox that silently drops a flow does. Each connection is tagged with the application_name
// of its StartupMessage, so one backend (e.g. the dispatcher's LISTEN connection) can be targeted.
import { createServer, connect, type Server, type Socket } from 'node:net';

export interface ProxiedConnection {
  readonly id: number;
  /** application_name from the StartupMessage, once seen. */
  applicationName: string | undefined;
  /** Bytes are held (not forwarded) in both directions; the sockets stay open. */
  held: boolean;
  closed: boolean;
  readonly openedAt: number;
  /** Bytes swallowed while held, per direction. */
  heldUp: number;
  heldDown: number;
}

const PROTOCOL_3 = 196608;

/** application_name of a StartupMessage (protocol 3.0), or undefined when `data` is not one. */
function startupApplicationName(data: Buffer): string | undefined {
  if (data.length < 8 || data.readInt32BE(4) !== PROTOCOL_3) return undefined;
  const length = Math.min(data.readInt32BE(0), data.length);
  const parts = data.subarray(8, length).toString('utf8').split('\u0000');
  for (let i = 0; i + 1 < parts.length; i += 2) if (parts[i] === 'application_name') return parts[i + 1];
  return undefined;
}

export class BlackholeProxy {
  readonly #server: Server;
  readonly #sockets = new Map<number, { client: Socket; upstream: Socket; info: ProxiedConnection }>();
  #next = 1;

  private constructor(host: string, port: number) {
    this.#server = createServer((client) => {
      this.accept(client, host, port);
    });
  }

  /** Listens on a free port of 127.0.0.1 and forwards to `host:port`. */
  static async start(host: string, port: number): Promise<BlackholeProxy> {
    const proxy = new BlackholeProxy(host, port);
    await new Promise<void>((resolve, reject) => {
      proxy.#server.once('error', reject);
      proxy.#server.listen(0, '127.0.0.1', () => {
        resolve();
      });
    });
    return proxy;
  }

  get port(): number {
    const address = this.#server.address();
    if (address === null || typeof address === 'string') throw new Error('proxy not listening');
    return address.port;
  }

  connections(): ProxiedConnection[] {
    return [...this.#sockets.values()].map((s) => s.info);
  }

  private accept(client: Socket, host: string, port: number): void {
    const info: ProxiedConnection = {
      id: this.#next++,
      applicationName: undefined,
      held: false,
      closed: false,
      openedAt: performance.now(),
      heldUp: 0,
      heldDown: 0,
    };
    const upstream = connect(port, host);
    this.#sockets.set(info.id, { client, upstream, info });
    let first = true;
    client.on('data', (data: Buffer) => {
      if (first) {
        first = false;
        info.applicationName = startupApplicationName(data);
      }
      if (info.held) info.heldUp += data.length;
      else upstream.write(data);
    });
    upstream.on('data', (data: Buffer) => {
      if (info.held) info.heldDown += data.length;
      else client.write(data);
    });
    // A blackholed flow delivers nothing, not even FIN or RST: closes propagate only while forwarding.
    const closeBoth = () => {
      if (info.held) return;
      info.closed = true;
      client.destroy();
      upstream.destroy();
      this.#sockets.delete(info.id);
    };
    client.on('close', closeBoth);
    upstream.on('close', closeBoth);
    client.on('error', () => undefined);
    upstream.on('error', () => undefined);
  }

  /** Blackholes the open connections matching `match`; returns how many. */
  blackhole(match: (c: ProxiedConnection) => boolean): number {
    let n = 0;
    for (const { info } of this.#sockets.values()) {
      if (!info.closed && match(info)) {
        info.held = true;
        n += 1;
      }
    }
    return n;
  }

  /** Resets (destroys both sockets of) the connections matching `match`: what a TCP timeout or RST eventually does. */
  reset(match: (c: ProxiedConnection) => boolean): number {
    let n = 0;
    for (const { client, upstream, info } of [...this.#sockets.values()]) {
      if (!match(info)) continue;
      info.held = false;
      info.closed = true;
      client.resetAndDestroy();
      upstream.destroy();
      this.#sockets.delete(info.id);
      n += 1;
    }
    return n;
  }

  async close(): Promise<void> {
    this.reset(() => true);
    await new Promise<void>((resolve) => {
      this.#server.close(() => {
        resolve();
      });
    });
  }
}

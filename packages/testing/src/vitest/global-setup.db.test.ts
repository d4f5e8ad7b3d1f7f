// What a test run prints when the embedded server cannot run where it is asked to (issue: "Any
// folder, any user"): the one line saying why and what to do, not a stack trace through the harness
// and vitest. Under root only: as any other user the server runs as that user, who reaches its own
// temporary folder.
import { spawn } from 'node:child_process';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { stripVTControlCharacters } from 'node:util';
import { expect, onTestFinished, test } from 'vitest';
import { useLoginRole } from './login-role.js';
import { useTestDatabase } from './test-database.js';

const db = await useTestDatabase();
const noCreatedb = useLoginRole(db, 'sluice_no_createdb');

const packageDir = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const vitestBin = join(dirname(createRequire(import.meta.url).resolve('vitest/package.json')), 'vitest.mjs');

/** Runs vitest on one database test file of this package, in `env`; its exit code and output. */
function runVitest(env: NodeJS.ProcessEnv): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [vitestBin, 'run', '--project', 'testing:db', 'src/drain.db.test.ts'],
      { cwd: packageDir, env, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let output = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    child.on('error', reject);
    child.on('close', (code) => {
      resolve({ code, output: stripVTControlCharacters(output) });
    });
  });
}

test.runIf(process.getuid?.() === 0)(
  "a temporary folder the postgres OS user cannot reach: the run stops with the embedded server's one line",
  async () => {
    const privateTmp = await mkdtemp(join(tmpdir(), 'sluice-private-tmp-'));
    onTestFinished(() => rm(privateTmp, { recursive: true, force: true }));
    expect((await stat(privateTmp)).mode & 0o777).toBe(0o700);
    // The environment of a user's shell: none of this run's vitest variables, no DATABASE_URL.
    const env = Object.fromEntries(
      Object.entries(process.env).filter(([name]) => !name.startsWith('VITEST') && name !== 'DATABASE_URL'),
    );
    const { code, output } = await runVitest({ ...env, TMPDIR: privateTmp, NO_COLOR: '1' });
    expect(code, output).toBe(1);
    const reason =
      'EmbeddedServerError: embedded PostgreSQL runs as the postgres OS user under root, which cannot reach ' +
      `the temporary folder ${privateTmp} (${privateTmp} is not traversable by it): set TMPDIR to a folder ` +
      'it can traverse (e.g. /tmp)';
    const lines = output.split('\n').map((line) => line.trim());
    expect(lines, output).toContain(reason);
    // Nothing after it but blank lines: no frames of the harness or of vitest.
    expect(
      lines.slice(lines.indexOf(reason) + 1).filter((line) => line !== ''),
      output,
    ).toEqual([]);
  },
);

test('a DATABASE_URL whose role may not create databases: the run stops with one line saying so', async () => {
  const url = new URL(db.url);
  url.username = noCreatedb.name;
  url.password = noCreatedb.password;
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('VITEST')));
  const { code, output } = await runVitest({ ...env, DATABASE_URL: url.toString(), NO_COLOR: '1' });
  expect(code, output).toBe(1);
  const reason =
    "Error: DATABASE_URL: cannot create the tests' template database (permission denied to create database, " +
    '42501): its role needs CREATEDB (every test file gets a database of its own, cloned from a template)';
  const lines = output.split('\n').map((line) => line.trim());
  expect(lines, output).toContain(reason);
  expect(output).not.toContain(noCreatedb.password);
});

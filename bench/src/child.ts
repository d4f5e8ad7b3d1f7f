// One scenario in a process of its own (spawned by main.ts): its timers, pools and peers' leftovers
// cannot disturb the next scenario, and the scale scenario's RSS is that of Sluice alone.
import { progress } from './harness/progress.js';
import { adminPool } from './harness/server.js';
import type { ScenarioId, ScenarioResult } from './report/types.js';
import type { ChildInput, ScenarioContext } from './scenarios/context.js';

// Imported on demand: the scale scenario's process loads Sluice and postgres.js, not the peers.
const SCENARIO_RUNNERS: Record<ScenarioId, () => Promise<(ctx: ScenarioContext) => Promise<ScenarioResult>>> =
  {
    'catch-up': async () => (await import('./scenarios/catch-up.js')).catchUp,
    'slow-handler': async () => (await import('./scenarios/slow-handler.js')).slowHandler,
    latency: async () => (await import('./scenarios/latency.js')).latency,
    append: async () => (await import('./scenarios/append.js')).appendOverhead,
    idle: async () => (await import('./scenarios/idle.js')).idleCost,
    scale: async () => (await import('./scenarios/scale.js')).scale,
    rebuild: async () => (await import('./scenarios/rebuild.js')).rebuild,
  };

// The orchestrator is gone (killed): its server is being stopped, nothing will read our result.
process.on('disconnect', () => {
  process.exit(1);
});

async function main(): Promise<void> {
  const raw = process.env['SLUICE_BENCH_CHILD'];
  if (raw === undefined || typeof process.send !== 'function') {
    throw new Error('child.ts is started by main.ts (pnpm bench), not directly');
  }
  const input = JSON.parse(raw) as ChildInput;
  const runScenario = await SCENARIO_RUNNERS[input.scenario as ScenarioId]();
  const admin = adminPool(input.serverUrl);
  try {
    const result = await runScenario({
      admin,
      serverUrl: input.serverUrl,
      versionNum: input.versionNum,
      config: input.config,
      postmasterPid: input.postmasterPid,
      pgStatStatements: input.pgStatStatements,
    });
    await new Promise<void>((resolve, reject) => {
      process.send?.({ result }, (error: Error | null) => {
        if (error) reject(error);
        else resolve();
      });
    });
  } finally {
    await admin.end();
  }
}

main().then(
  () => {
    // Peers (graphile-worker, Emmett) may leave handles behind; the result is sent.
    process.exit(0);
  },
  (error: unknown) => {
    progress(`scenario failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    process.exit(1);
  },
);

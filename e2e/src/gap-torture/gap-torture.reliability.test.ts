// docs/reliability.md §6: model-based gap torture against real PostgreSQL sessions. fast-check
// generates interleavings of writers (begin, xid, nextval, insert, commit, rollback), a foreign transaction
// in another database, xid burning and dispatcher passes — some splitting a turn right after its
// fetch — and a facts-only model checks I2, I3, I4, I7 and I8 after every step and I1 at
// quiescence. Two dispatcher instances take turns, and a pass can stop inside its lock statements
// while other commands run (lock takeover: the other instance takes the row and commits, and the
// lock proceeds on the new row version). One consumer runs as lanes, and operators change its lane
// count (Relane) while writers hold ids below the barrier. The same property must fail against
// each of eight deliberately broken dispatchers.
import { randomBytes } from 'node:crypto';
import type { Sql } from '@sluice/core';
import { withDatabase } from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import fc from 'fast-check';
import postgres from 'postgres';
import { afterAll, beforeAll, expect, test, vi } from 'vitest';
import type * as GapsModule from '../../../packages/core/src/gaps/gaps.js';
import type * as EventsModule from '../../../packages/core/src/queries/events.js';
import type * as ConsumersModule from '../../../packages/core/src/queries/consumers.js';
import type * as TurnStepsModule from '../../../packages/core/src/dispatcher/turn-steps.js';
import { profile, recordSuiteResult, type ScenarioResult } from '../report/results.js';
import { commandArbitraries } from './commands.js';
import { TortureRun, type Pools } from './harness.js';
import type { Violation } from './model.js';
import { MUTANTS, switchboard, type Mutant } from './switchboard.js';

// The seams (test code only): settleTurn, fetchBatch, fetchFilteredBatch, lockConsumer and
// settleLaneChange wrapped to consult the switchboard.
vi.mock('../../../packages/core/src/gaps/gaps.ts', async (importOriginal) => {
  const real = await importOriginal<typeof GapsModule>();
  const { switchboard: board } = await import('./switchboard.js');
  const settleTurn: typeof real.settleTurn = (input, delivered) => {
    const mutant = board().mutant;
    if (mutant === 'burn-by-age') {
      // Give up on any range older than 20 ms, whatever its fence says (Axon #4829).
      const aged = input.rechecked.map((r) => {
        const observedAt = (r as { observedAt?: Date }).observedAt;
        return observedAt && Date.now() - observedAt.getTime() > 20 ? { ...r, fence: 0n } : r;
      });
      return real.settleTurn({ ...input, rechecked: aged }, delivered);
    }
    const settled = real.settleTurn(input, delivered);
    if (mutant === 'cursor-only') return { ...settled, ranges: [] };
    if (mutant === 'fence-is-xmax') {
      const xmax = board().lastFetchXmax;
      return {
        ...settled,
        ranges: settled.ranges.map((r) => (r.fence === null && xmax !== null ? { ...r, fence: xmax } : r)),
      };
    }
    return settled;
  };
  return { ...real, settleTurn };
});

vi.mock('../../../packages/core/src/queries/events.ts', async (importOriginal) => {
  const real = await importOriginal<typeof EventsModule>();
  const { switchboard: board } = await import('./switchboard.js');
  // Every argument passed on: a 'now' consumer's stragglers, a lane group's lanes (docs/design.md §11.2).
  const fetchBatch: typeof real.fetchBatch = async (tx, t, cursor, ranges, limit, start, group) => {
    const batch = await real.fetchBatch(tx, t, cursor, ranges, limit, start, group);
    const hook = board().afterFetch;
    if (hook) {
      board().afterFetch = null;
      await hook();
    }
    board().lastFetchXmax = BigInt(batch.snapshot.split(':')[1] ?? '0');
    if (board().mutant === 'late-snapshot') {
      // The burn check's xmin comes from a later statement than the fetch (Marten #4953).
      const [later] = await tx<{ snapshot: string }[]>`select pg_current_snapshot()::text as snapshot`;
      batch.snapshot = later?.snapshot ?? batch.snapshot;
    }
    return batch;
  };
  // A lane's fetch (docs/design.md §11.2): the same seams.
  const fetchFilteredBatch: typeof real.fetchFilteredBatch = async (
    tx,
    t,
    cursor,
    ranges,
    limit,
    filter,
    start,
  ) => {
    const batch = await real.fetchFilteredBatch(tx, t, cursor, ranges, limit, filter, start);
    const hook = board().afterFetch;
    if (hook) {
      board().afterFetch = null;
      await hook();
    }
    board().lastFetchXmax = BigInt(batch.snapshot.split(':')[1] ?? '0');
    if (board().mutant === 'late-snapshot') {
      const [later] = await tx<{ snapshot: string }[]>`select pg_current_snapshot()::text as snapshot`;
      return { ...batch, snapshot: later?.snapshot ?? batch.snapshot };
    }
    return batch;
  };
  return { ...real, fetchBatch, fetchFilteredBatch };
});

vi.mock('../../../packages/core/src/queries/consumers.ts', async (importOriginal) => {
  const real = await importOriginal<typeof ConsumersModule>();
  const { switchboard: board } = await import('./switchboard.js');
  const lockConsumer: typeof real.lockConsumer = (tx, t, name, instanceId, timeouts) => {
    if (board().mutant === 'fence-before-lock') {
      // The turn's xid is drawn by a statement ahead of its lock statement, so it predates the
      // row lock (as one drawn in the lock statement's own select list would): the read after
      // the lock then returns that older xid as the turn's fence.
      tx`select pg_current_xact_id()`.catch(() => undefined);
    }
    return real.lockConsumer(tx, t, name, instanceId, timeouts);
  };
  return { ...real, lockConsumer };
});

vi.mock('../../../packages/core/src/dispatcher/turn-steps.ts', async (importOriginal) => {
  const real = await importOriginal<typeof TurnStepsModule>();
  const { switchboard: board } = await import('./switchboard.js');
  const settleLaneChange: typeof real.settleLaneChange = (env, consumer, tx, change, after) =>
    real.settleLaneChange(
      env,
      consumer,
      tx,
      change,
      // An old lane hands over as soon as it reaches the barrier, its pending gaps forgotten.
      board().mutant === 'relane-drops-gaps' ? { ...after, pendingGaps: 0 } : after,
    );
  return { ...real, settleLaneChange };
});

const PROFILE = profile();
const RUNS = Number(process.env['GAP_TORTURE_RUNS'] ?? (PROFILE === 'soak' ? 5000 : 150));
const COMMANDS = 60;
const MUTANT_RUNS = Number(process.env['GAP_TORTURE_MUTANT_RUNS'] ?? 150);
const SEED = Number(process.env['GAP_TORTURE_SEED'] ?? Math.floor(Math.random() * 2 ** 31));

const db = await useTestDatabase();
let pools: Pools;
const opened: Sql[] = [];
const foreignDb = `gt_foreign_${randomBytes(4).toString('hex')}`;
// The dispatchers connect as a role without superuser rights, so that row-level security (the
// harness's parking of lock statements) applies to them.
const dispatcherRole = `gt_dispatcher_${randomBytes(4).toString('hex')}`;
const dispatcherPassword = randomBytes(12).toString('hex');

beforeAll(async () => {
  await db.sql.unsafe(`create database "${foreignDb}"`);
  await db.sql.unsafe(`create role "${dispatcherRole}" login password '${dispatcherPassword}'`);
  const pool = (
    url: string,
    max: number,
    name: string,
    login: { user: string; password: string } | object = {},
  ) => {
    const sql = postgres(url, {
      max,
      onnotice: () => undefined,
      connection: { application_name: name },
      ...login,
    }) as unknown as Sql;
    opened.push(sql);
    return sql;
  };
  const asDispatcher = { user: dispatcherRole, password: dispatcherPassword };
  pools = {
    admin: pool(db.url, 3, 'gt-admin'),
    writers: pool(db.url, 5, 'gt-writer'),
    dispatchers: [pool(db.url, 4, 'gt-disp-0', asDispatcher), pool(db.url, 4, 'gt-disp-1', asDispatcher)],
    foreign: pool(withDatabase(db.url, foreignDb), 2, 'gt-foreign'),
    dispatcherRole,
  };
});

afterAll(async () => {
  for (const sql of opened) await sql.end({ timeout: 1 });
  await db.sql.unsafe(`drop database if exists "${foreignDb}" with (force)`);
  await db.sql.unsafe(`drop owned by "${dispatcherRole}"; drop role if exists "${dispatcherRole}"`);
});

/** One run: a fresh world, the generated commands, quiescence; returns what the model saw go wrong. */
async function runCommands(
  mutant: Mutant | null,
  commands: Iterable<fc.AsyncCommand<TortureRun, TortureRun>>,
) {
  const run = await TortureRun.start(pools, mutant);
  try {
    await fc.asyncModelRun(() => ({ model: run, real: run }), commands);
    await run.quiesce();
    return {
      violations: [...run.model.violations],
      steps: run.log.length,
      log: [...run.log, ...(run.said.length > 0 ? ['-- the dispatchers said:', ...run.said] : [])],
      parkedStops: run.parkedStops,
      relanes: run.relanes,
      switched: await run.lanesSwitched(),
    };
  } finally {
    await run.close();
  }
}

function describeFailure(violations: readonly Violation[], log: readonly string[]): string {
  return `${violations.map((v) => `${v.invariant}: ${v.message}`).join('\n')}\nsteps:\n  ${log.join('\n  ')}`;
}

const commandsArbitrary = fc.commands(commandArbitraries, { maxCommands: COMMANDS, size: 'max' });
const scenarios: ScenarioResult[] = [];
const runsToKill: Record<string, number> = {};
const started = Date.now();

test(`the dispatcher survives ${RUNS} runs of ${COMMANDS} commands with no violation`, async () => {
  let runs = 0;
  let steps = 0;
  let parkedStops = 0;
  let relanes = 0;
  let switched = 0;
  let lastFailure = '';
  const result = await fc.check(
    fc.asyncProperty(commandsArbitrary, async (commands) => {
      runs += 1;
      const run = await runCommands(null, commands);
      const { violations, log } = run;
      steps += run.steps;
      parkedStops += run.parkedStops;
      relanes += run.relanes;
      switched += run.switched;
      if (violations.length > 0) {
        lastFailure = describeFailure(violations, log);
        throw new Error(lastFailure);
      }
    }),
    { numRuns: RUNS, seed: SEED, endOnFailure: false },
  );
  scenarios.push({
    id: 'GT',
    title: `gap torture: ${RUNS} runs × ${COMMANDS} commands against the real dispatcher`,
    invariants: ['I1', 'I2', 'I3', 'I4', 'I7', 'I8'],
    figures: {
      runs,
      steps,
      'passes parked in their lock statement': parkedStops,
      'lane count changes asked for / switched over': `${relanes} / ${switched}`,
      violations: result.failed ? 1 : 0,
      seed: SEED,
      ...(result.failed ? { path: result.counterexamplePath ?? '' } : {}),
    },
    ok: !result.failed,
    ...(result.failed ? { failure: lastFailure.split('\n')[0] ?? '' } : {}),
  });
  // The takeover schedules need passes that really stop before their row is locked: a rig whose
  // parking no longer applies (a renamed connection, a superuser role) would pass vacuously.
  expect(parkedStops, 'no PassParked step ever stopped a pass in its lock statement').toBeGreaterThan(0);
  // Likewise the lane-count changes: they must really have switched over during the runs.
  expect(switched, 'no change of lane count ever switched over').toBeGreaterThan(0);
  if (result.failed) {
    // The commands print with the replay path fast-check needs to run this schedule again.
    throw new Error(
      `gap torture found a violation (seed ${SEED}, path ${result.counterexamplePath ?? '?'}, commands ${result.counterexample ? fc.stringify(result.counterexample[0]) : '?'}):\n${lastFailure}`,
    );
  }
});

for (const mutant of MUTANTS) {
  test(`mutant "${mutant}" is killed`, async () => {
    let runs = 0;
    let killedBy = '';
    const result = await fc.check(
      fc.asyncProperty(commandsArbitrary, async (commands) => {
        runs += 1;
        const { violations, log } = await runCommands(mutant, commands);
        if (violations.length > 0) {
          killedBy = describeFailure(violations, log);
          throw new Error(killedBy);
        }
      }),
      { numRuns: MUTANT_RUNS, seed: SEED, endOnFailure: true },
    );
    runsToKill[mutant] = result.failed ? runs : -1;
    scenarios.push({
      id: `M-${mutant}`,
      title: `mutant ${mutant} must fail the property`,
      invariants: ['I1', 'I8'],
      figures: {
        killed: result.failed ? 'yes' : 'no',
        runsToKill: result.failed ? runs : `> ${MUTANT_RUNS}`,
        firstViolation: killedBy.split('\n')[0] ?? '',
      },
      ok: result.failed,
      ...(result.failed ? {} : { failure: `survived ${MUTANT_RUNS} runs` }),
    });
    expect(result.failed, `mutant ${mutant} survived ${MUTANT_RUNS} runs (seed ${SEED})`).toBe(true);
  });
}

afterAll(async () => {
  const killed = Object.values(runsToKill).filter((n) => n > 0).length;
  await recordSuiteResult({
    suite: 'gap-torture',
    profile: PROFILE,
    startedAt: new Date(started).toISOString(),
    durationMs: Date.now() - started,
    mutantsKilled: { killed, total: MUTANTS.length, runsToKill },
    seeds: [SEED],
    scenarios,
  });
  switchboard().mutant = null;
});

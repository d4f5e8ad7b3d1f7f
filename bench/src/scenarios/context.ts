import type postgres from 'postgres';
import type { BenchConfig } from '../config.js';
import { Meter } from '../harness/counters.js';
import { databaseOid, databaseUrl, dropDatabase } from '../harness/server.js';
import { freshDatabase, type TemplateContext } from '../harness/templates.js';

/** What a scenario child process is given by the orchestrator. */
export interface ChildInput {
  readonly scenario: string;
  readonly config: BenchConfig;
  readonly serverUrl: string;
  readonly postmasterPid: number | undefined;
  readonly versionNum: number;
  readonly pgStatStatements: boolean;
}

export interface ScenarioContext extends TemplateContext {
  readonly config: BenchConfig;
  readonly postmasterPid: number | undefined;
  readonly pgStatStatements: boolean;
}

export interface RunDatabase {
  readonly name: string;
  readonly url: string;
  readonly oid: number;
  meter(): Meter;
  drop(): Promise<void>;
}

/**
 * A fresh database cloned from `template` for one run. `deferDrop`: leave it to the orchestrator,
 * which drops every run database once the scenario's process has exited (Emmett keeps pool
 * connections after close(), and a forced drop under them crashes the process from inside pg).
 */
export async function runDatabase(
  ctx: ScenarioContext,
  template: string,
  label: string,
  options: { deferDrop?: boolean } = {},
): Promise<RunDatabase> {
  const name = await freshDatabase(ctx, template, label);
  const oid = await databaseOid(ctx.admin, name);
  return {
    name,
    url: databaseUrl(ctx.serverUrl, name),
    oid,
    meter: () => new Meter(ctx.admin, oid, ctx.pgStatStatements, ctx.postmasterPid),
    drop: () => (options.deferDrop === true ? Promise.resolve() : dropDatabase(ctx.admin, name)),
  };
}

/** `items` rotated by `run`, so no system always runs first (or right after the same neighbour). */
export function rotate<T>(items: readonly T[], run: number): T[] {
  const k = run % Math.max(1, items.length);
  return [...items.slice(k), ...items.slice(0, k)];
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export type { postgres };

// Collects e2e/results/*.json into e2e/RESULTS.md and prints the summary table.
import { execFileSync } from 'node:child_process';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import type { SuiteResult } from './results.js';

const RESULTS_DIR = new URL('../../results/', import.meta.url);
const OUTPUT = new URL('../../RESULTS.md', import.meta.url);

function commit(): string {
  try {
    const sha = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
    // What the test runs themselves write (this file, the screenshots of the browser test) is not
    // a change to what was tested.
    const written = ['e2e/RESULTS.md', 'e2e/results', 'docs/images'].map((path) => `:(top,exclude)${path}`);
    const status = execFileSync('git', ['status', '--porcelain', '--', ':(top)', ...written], {
      encoding: 'utf8',
    });
    const dirty = status.trim() !== '';
    return dirty ? `${sha} (with uncommitted changes)` : sha;
  } catch {
    return 'unknown';
  }
}

const files = (await readdir(RESULTS_DIR).catch(() => [])).filter((f) => f.endsWith('.json')).sort();
const suites: SuiteResult[] = [];
for (const file of files)
  suites.push(JSON.parse(await readFile(new URL(file, RESULTS_DIR), 'utf8')) as SuiteResult);

const lines: string[] = [];
const cell = (v: unknown) => String(v).replace(/\|/g, '\\|');
lines.push('# Reliability results', '');
lines.push(`Written ${new Date().toISOString()} from commit ${commit()}, Node ${process.version}.`);
lines.push(
  'Rerun: `pnpm test:reliability` (CI profile, part of `.ci/run`) or `pnpm test:soak` (long profile, by hand).',
  '',
);
lines.push('| suite | profile | PostgreSQL | duration | scenarios ok |', '| --- | --- | --- | --- | --- |');
for (const s of suites) {
  const ok = s.scenarios.filter((x) => x.ok).length;
  lines.push(
    `| ${s.suite} | ${s.profile} | ${s.postgresVersion ?? '—'} | ${(s.durationMs / 1000).toFixed(0)} s | ${ok}/${s.scenarios.length} |`,
  );
}
for (const s of suites) {
  lines.push('', `## ${s.suite}`, '');
  lines.push(`Started ${s.startedAt}; ${(s.durationMs / 1000).toFixed(0)} s; profile ${s.profile}.`);
  if (s.events)
    lines.push(
      `Events appended ${s.events.appended}, committed ${s.events.committed}, aborted ${s.events.aborted}.`,
    );
  if (s.faults)
    lines.push(
      `Faults injected: ${Object.entries(s.faults)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ')}.`,
    );
  if (s.recoveryMs)
    lines.push(
      `Recovery (fault → next delivery): p50 ${s.recoveryMs.p50} ms, p99 ${s.recoveryMs.p99} ms over ${s.recoveryMs.samples} faults.`,
    );
  if (s.maxPendingRanges !== undefined) lines.push(`Max pending gap ranges: ${s.maxPendingRanges}.`);
  if (s.mutantsKilled) {
    lines.push(
      `Mutants killed: ${s.mutantsKilled.killed}/${s.mutantsKilled.total} (runs to kill: ${Object.entries(
        s.mutantsKilled.runsToKill,
      )
        .map(([k, v]) => `${k} ${v}`)
        .join(', ')}).`,
    );
  }
  if (s.seeds?.length) lines.push(`Seeds: ${s.seeds.join(', ')}.`);
  if (s.consumers?.length) {
    lines.push(
      '',
      '| consumer | lost | duplicated | late | inversions | cursor regressions | phantoms |',
      '| --- | --- | --- | --- | --- | --- | --- |',
    );
    for (const c of s.consumers) {
      lines.push(
        `| ${cell(c.consumer)} | ${c.lost} | ${c.duplicated} | ${c.late} | ${c.inversions} | ${c.cursorRegressions} | ${c.phantoms} |`,
      );
    }
  }
  lines.push('', '| id | scenario | invariants | figures | ok |', '| --- | --- | --- | --- | --- |');
  for (const x of s.scenarios) {
    const figures = Object.entries(x.figures)
      .map(([k, v]) => `${k}: ${v}`)
      .join('; ');
    lines.push(
      `| ${x.id} | ${cell(x.title)} | ${x.invariants.join(' ')} | ${cell(figures)} | ${x.ok ? 'yes' : `**NO**: ${cell(x.failure ?? '')}`} |`,
    );
  }
}
await writeFile(OUTPUT, `${lines.join('\n')}\n`);

// The console summary.
console.log('\nReliability summary');
for (const s of suites) {
  const bad = s.scenarios.filter((x) => !x.ok);
  console.log(
    `  ${s.suite.padEnd(14)} ${String(s.scenarios.length - bad.length).padStart(3)}/${s.scenarios.length} ok  ${bad.map((x) => x.id).join(' ')}`,
  );
  for (const c of s.consumers ?? []) {
    if (c.lost + c.inversions + c.cursorRegressions + c.phantoms > 0) {
      console.log(
        `    ${c.consumer}: lost ${c.lost} inversions ${c.inversions} regressions ${c.cursorRegressions} phantoms ${c.phantoms}`,
      );
    }
  }
}
console.log(`Written ${OUTPUT.pathname}`);

import { formatFigure, integrity } from './format.js';
import { evaluateTargets, formatAchieved, verdict } from './targets.js';
import type { ScenarioResult } from './types.js';

/** Figures shown in the terminal table besides the headline (RESULTS.md has all of them). */
const SHOWN: Record<string, readonly string[]> = {
  'catch-up': ['per consumer', 'PostgreSQL CPU', 'Node CPU', 'statements sent per 100 events'],
  latency: ['p99', 'commit→handler p50', 'commit→handler p99', 'allocated per event'],
  append: ['transactions/s', 'commit p99'],
  idle: ['statements per poll tick', 'write transactions', 'PostgreSQL CPU', 'Node CPU'],
  scale: ['last quarter / first quarter', 'peak RSS'],
  'slow-handler': [
    'of the ceiling',
    'per-stream inversions',
    'per-stream inversions at finish',
    'per-stream overlaps',
    'busiest lane ÷ mean lane',
  ],
  rebuild: [
    'commit→handler p50',
    'append→commit p99',
    'PostgreSQL CPU',
    'Node CPU, dispatcher process',
    'rebuild took',
    'takeover took',
  ],
};

/** The one table `pnpm bench` prints: every row's headline over the runs, then the targets. */
export function renderTable(results: readonly ScenarioResult[]): string {
  const lines: string[][] = [
    ['scenario', 'case', 'system', 'headline: median (min–max)', 'more (medians)', 'lost / dup'],
  ];
  for (const result of results) {
    for (const row of result.rows) {
      const [headline, ...rest] = row.figures;
      const more = rest
        .filter((f) => SHOWN[result.scenario]?.includes(f.name))
        .map((f) => `${f.name} ${formatFigure(f, false)}`)
        .join(', ');
      lines.push([
        result.scenario,
        row.case,
        row.system,
        headline ? `${headline.name} ${formatFigure(headline)}` : '',
        more,
        integrity(row),
      ]);
    }
  }
  const targets: string[][] = [['scenario', 'target', 'achieved: median (min–max)', 'goal', '']];
  for (const t of evaluateTargets(results)) {
    targets.push([t.scenario, t.target, formatAchieved(t), t.goal, verdict(t)]);
  }
  return `${align(lines)}\n\n${align(targets)}`;
}

function align(rows: readonly string[][]): string {
  const widths: number[] = [];
  for (const row of rows) row.forEach((cell, i) => (widths[i] = Math.max(widths[i] ?? 0, cell.length)));
  return rows
    .map((row, index) => {
      const line = row
        .map((cell, i) => cell.padEnd(widths[i] ?? 0))
        .join('  ')
        .trimEnd();
      return index === 0 ? `${line}\n${widths.map((w) => '-'.repeat(w)).join('  ')}` : line;
    })
    .join('\n');
}

import { formatNumber, summarize } from '../harness/stats.js';
import type { Figure, ResultRow } from './types.js';

/** "41.2k (40.1k–42.0k)" with the unit appended when it is not a count. */
export function formatFigure(figure: Figure, withRange = true): string {
  const s = summarize(figure.runs);
  if (s.runs === 0) return 'n/a';
  const unit = unitSuffix(figure.unit);
  if (!withRange || s.min === s.max) return `${formatNumber(s.median)}${unit}`;
  return `${formatNumber(s.median)}${unit} (${formatNumber(s.min)}–${formatNumber(s.max)})`;
}

function unitSuffix(unit: string): string {
  if (unit === '') return '';
  if (unit === '% of a core') return ' %';
  if (unit === '×') return '×';
  return ` ${unit}`;
}

export function figureLabel(figure: Figure): string {
  return figure.unit === '' || figure.unit === '×' ? figure.name : `${figure.name} (${figure.unit})`;
}

export function integrity(row: ResultRow): string {
  const lost = row.lost.reduce((a, b) => a + b, 0);
  const duplicated = row.duplicated.reduce((a, b) => a + b, 0);
  return `${lost} / ${duplicated}`;
}

import type { ConsumerSummary } from '../../read-models.js';
import { defineCommand } from '../command.js';
import { JSON_OPTION } from '../common-options.js';
import { instanceLabel, laneChangeText } from '../format-action.js';
import { formatTable } from '../format-table.js';
import { formatAge, oneLine, truncate } from '../format-text.js';
import { toJson } from '../to-json.js';

const COLUMNS = [
  { title: 'NAME' },
  { title: 'INSTANCE' },
  { title: 'STATUS' },
  { title: 'CURSOR', align: 'right' },
  { title: 'HEAD', align: 'right' },
  { title: 'LAG', align: 'right' },
  { title: 'GAPS', align: 'right' },
  { title: 'ATTEMPTS', align: 'right' },
  { title: 'LAST ERROR' },
] as const;

function row(c: ConsumerSummary): string[] {
  const lag = c.lagSeconds === null ? `${c.lagEvents}` : `${c.lagEvents} (${formatAge(c.lagSeconds)})`;
  return [
    c.name,
    instanceLabel(c.instanceId),
    c.status,
    c.cursor.toString(),
    c.head.toString(),
    lag,
    String(c.pendingGaps),
    String(c.attempts),
    c.lastError === null ? '-' : truncate(oneLine(c.lastError), 60),
  ];
}

/**
 * What holds for a consumer as a whole rather than for one of its rows, one line each under the
 * table: a change of its lane count in progress, its parked keys (docs/design.md §11).
 */
function consumerLines(consumers: readonly ConsumerSummary[]): string[] {
  const lines: string[] = [];
  for (const name of new Set(consumers.map((c) => c.name))) {
    const rows = consumers.filter((c) => c.name === name);
    const change = rows.find((c) => c.laneChange !== null)?.laneChange;
    if (change) lines.push(`${name}: changing ${laneChangeText(change)}`);
    const parked = rows[0]?.parkedKeys ?? 0;
    if (parked > 0)
      lines.push(`${name}: ${parked} parked key(s), their events set aside (sluice parked ${name})`);
  }
  return lines;
}

/** `sluice status`: every cursor row (listConsumers). */
export const statusCommand = defineCommand({
  name: 'status',
  summary: 'every consumer row: status, cursor, head, lag, gaps, attempts, last error',
  positionals: [],
  options: { json: JSON_OPTION },
  notes: [
    'LAG is in events, with the age of the oldest event not reached yet.',
    'INSTANCE is * for a shared consumer, "lane k of N" for each lane of one run as lanes (its row *k/N),',
    'else the instance of a per-instance row. Under the table, a line for each change of lane count in',
    'progress and for each consumer with parked keys.',
  ],
  prepare({ options }) {
    const json = options.flag('json');
    return async (admin) => {
      const consumers = await admin.listConsumers();
      if (json) return toJson(consumers);
      if (consumers.length === 0) return 'no consumers are registered';
      const lines = consumerLines(consumers);
      const table = formatTable(COLUMNS, consumers.map(row));
      return lines.length === 0 ? table : [table, '', ...lines].join('\n');
    };
  },
});

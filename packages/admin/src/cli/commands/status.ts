import type { ConsumerSummary } from '../../read-models.js';
import { defineCommand } from '../command.js';
import { JSON_OPTION } from '../common-options.js';
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
    c.instanceId,
    c.status,
    c.cursor.toString(),
    c.head.toString(),
    lag,
    String(c.pendingGaps),
    String(c.attempts),
    c.lastError === null ? '-' : truncate(oneLine(c.lastError), 60),
  ];
}

/** `sluice status`: every cursor row (listConsumers). */
export const statusCommand = defineCommand({
  name: 'status',
  summary: 'every consumer row: status, cursor, head, lag, gaps, attempts, last error',
  positionals: [],
  options: { json: JSON_OPTION },
  notes: ['LAG is in events, with the age of the oldest event not reached yet.'],
  prepare({ options }) {
    const json = options.flag('json');
    return async (admin) => {
      const consumers = await admin.listConsumers();
      if (json) return toJson(consumers);
      if (consumers.length === 0) return 'no consumers are registered';
      return formatTable(COLUMNS, consumers.map(row));
    };
  },
});

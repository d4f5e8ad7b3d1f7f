import type { AuditRecord } from '../../read-models.js';
import { defineCommand } from '../command.js';
import { JSON_OPTION } from '../common-options.js';
import { instanceLabel } from '../format-action.js';
import { formatTable } from '../format-table.js';
import { formatTime, truncate } from '../format-text.js';
import { optionalName, parseLimit } from '../parse-values.js';
import { toJson } from '../to-json.js';
import { withoutUndefined } from '../without-undefined.js';

const COLUMNS = [
  { title: 'ID', align: 'right' },
  { title: 'AT' },
  { title: 'ACTOR' },
  { title: 'ACTION' },
  { title: 'CONSUMER' },
  { title: 'CURSOR' },
  { title: 'DETAILS' },
] as const;

function cursor(a: AuditRecord): string {
  if (a.cursorBefore === null && a.cursorAfter === null) return '-';
  if (a.cursorBefore === a.cursorAfter) return String(a.cursorBefore);
  return `${a.cursorBefore ?? '-'} → ${a.cursorAfter ?? '-'}`;
}

function details(a: AuditRecord): string {
  const shown = Object.entries(a.details).filter(([, value]) => value !== null);
  return shown.length === 0 ? '-' : truncate(JSON.stringify(Object.fromEntries(shown)), 60);
}

function row(a: AuditRecord): string[] {
  const consumer =
    a.consumer === null
      ? '-'
      : a.instanceId === '*' || a.instanceId === null
        ? a.consumer
        : `${a.consumer} (${instanceLabel(a.instanceId)})`;
  return [a.id.toString(), formatTime(a.at), a.actor, a.action, consumer, cursor(a), details(a)];
}

/** `sluice audit`: the operator actions, newest first (listAudit). */
export const auditCommand = defineCommand({
  name: 'audit',
  summary: 'the audit trail of operator actions, newest first',
  positionals: [],
  options: {
    consumer: { type: 'string', value: 'name', description: 'only the actions on this consumer' },
    limit: { type: 'string', value: 'n', description: 'at most this many (1–1000, default 100)' },
    json: JSON_OPTION,
  },
  prepare({ options }) {
    const limitText = options.text('limit');
    const query = withoutUndefined({
      consumer: optionalName(options.text('consumer'), '--consumer'),
      limit: limitText === undefined ? undefined : parseLimit(limitText),
    });
    const json = options.flag('json');
    return async (admin) => {
      const records = await admin.listAudit(query);
      if (json) return toJson(records);
      if (records.length === 0) return 'no audited actions';
      return formatTable(COLUMNS, records.map(row));
    };
  },
});

import type { ParkedEvent } from '../../read-models.js';
import { defineCommand } from '../command.js';
import { JSON_OPTION, KEY_OPTION } from '../common-options.js';
import { formatTable } from '../format-table.js';
import { formatTime, keyText, oneLine, truncate } from '../format-text.js';
import { parseKey, parseLimit, parseName } from '../parse-values.js';
import { toJson } from '../to-json.js';
import { withoutUndefined } from '../without-undefined.js';

const COLUMNS = [
  { title: 'EVENT', align: 'right' },
  { title: 'TYPE' },
  { title: 'STREAM' },
  { title: 'CREATED' },
  { title: 'PARKED' },
  { title: 'ERROR' },
] as const;

function row(e: ParkedEvent): string[] {
  return [
    e.eventId.toString(),
    e.type,
    e.streamId,
    formatTime(e.eventCreatedAt),
    formatTime(e.parkedAt),
    e.error === null ? '-' : truncate(oneLine(e.error), 60),
  ];
}

/** `sluice parked-events <name> --key <key>`: the events set aside under one parked key (listParkedEvents). */
export const parkedEventsCommand = defineCommand({
  name: 'parked-events',
  summary: 'the events a consumer set aside under one parked key, in the order a replay delivers them',
  positionals: [{ name: 'name', description: 'the consumer' }],
  options: {
    key: KEY_OPTION,
    limit: {
      type: 'string',
      value: 'n',
      description: 'at most this many, oldest first (1–1000, default 100)',
    },
    json: JSON_OPTION,
  },
  notes: [
    'ERROR is set on the event whose failure parked the key; the events after it were set aside unread.',
    "--json gives each event's data and metadata too.",
    'Exit 3 when the key is not parked (sluice parked lists the parked keys).',
  ],
  prepare({ args: [nameText = ''], options }) {
    const name = parseName(nameText, '<name>');
    const limitText = options.text('limit');
    const query = {
      key: parseKey(options.text('key')),
      ...withoutUndefined({ limit: limitText === undefined ? undefined : parseLimit(limitText) }),
    };
    const json = options.flag('json');
    return async (admin) => {
      const events = await admin.listParkedEvents(name, query);
      if (json) return toJson(events);
      if (events.length === 0) return `parked key ${keyText(query.key)} of ${name} has no events set aside`;
      return formatTable(COLUMNS, events.map(row));
    };
  },
});

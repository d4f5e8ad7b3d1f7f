import type { ParkedKey } from '../../read-models.js';
import { defineCommand } from '../command.js';
import { JSON_OPTION } from '../common-options.js';
import { formatTable } from '../format-table.js';
import { formatTime, keyText, oneLine, truncate } from '../format-text.js';
import { parseLimit, parseName } from '../parse-values.js';
import { toJson } from '../to-json.js';
import { withoutUndefined } from '../without-undefined.js';

const COLUMNS = [
  { title: 'KEY' },
  { title: 'FIRST EVENT', align: 'right' },
  { title: 'EVENTS', align: 'right' },
  { title: 'ATTEMPTS', align: 'right' },
  { title: 'PARKED' },
  { title: 'REPLAY' },
  { title: 'ERROR' },
] as const;

function row(k: ParkedKey): string[] {
  return [
    keyText(k.key),
    k.firstEventId.toString(),
    String(k.events),
    String(k.attempts),
    formatTime(k.parkedAt),
    k.replayRequestedAt === null ? '-' : 'requested',
    k.error === null ? '-' : truncate(oneLine(k.error), 60),
  ];
}

/** `sluice parked <name>`: the keys a consumer parked (listParkedKeys). */
export const parkedCommand = defineCommand({
  name: 'parked',
  summary: "a consumer's parked keys (errorPolicy.parkKey): their events wait for replay-key or drop-key",
  positionals: [{ name: 'name', description: 'the consumer' }],
  options: {
    limit: { type: 'string', value: 'n', description: 'at most this many (1–1000, default 100)' },
    json: JSON_OPTION,
  },
  notes: [
    'By the id of the event that parked each key (FIRST EVENT); EVENTS counts its events set aside, that one included.',
    'KEY is what sluice parked-events, replay-key and drop-key take with --key; a key shown in double quotes is',
    'JSON-quoted (empty, or with spaces, quotes or control characters); --json gives every key as it is.',
  ],
  prepare({ args: [nameText = ''], options }) {
    const name = parseName(nameText, '<name>');
    const limitText = options.text('limit');
    const query = withoutUndefined({ limit: limitText === undefined ? undefined : parseLimit(limitText) });
    const json = options.flag('json');
    return async (admin) => {
      const keys = await admin.listParkedKeys(name, query);
      if (json) return toJson(keys);
      if (keys.length === 0) return `no parked keys for ${name}`;
      return formatTable(COLUMNS, keys.map(row));
    };
  },
});

import type { DeadLetter } from '../../read-models.js';
import { defineCommand } from '../command.js';
import { INSTANCE_OPTION, JSON_OPTION } from '../common-options.js';
import { formatTable } from '../format-table.js';
import { formatTime, oneLine, truncate } from '../format-text.js';
import { optionalName, parseLimit, parseName } from '../parse-values.js';
import { toJson } from '../to-json.js';
import { withoutUndefined } from '../without-undefined.js';

const COLUMNS = [
  { title: 'ID', align: 'right' },
  { title: 'EVENT', align: 'right' },
  { title: 'TYPE' },
  { title: 'STREAM' },
  { title: 'REASON' },
  { title: 'ATTEMPTS', align: 'right' },
  { title: 'CREATED' },
  { title: 'REPLAY' },
  { title: 'ERROR' },
] as const;

function replayState(d: DeadLetter): string {
  if (d.replayedAt !== null) return `done ${formatTime(d.replayedAt)}`;
  return d.replayRequestedAt === null ? '-' : 'requested';
}

function row(d: DeadLetter): string[] {
  return [
    d.id.toString(),
    d.eventId.toString(),
    d.type,
    d.streamId,
    d.reason,
    String(d.attempts),
    formatTime(d.createdAt),
    replayState(d),
    d.error === null ? '-' : truncate(oneLine(d.error), 60),
  ];
}

/** `sluice dead-letters <name>`: a consumer's dead letters, newest first (listDeadLetters). */
export const deadLettersCommand = defineCommand({
  name: 'dead-letters',
  summary: "a consumer's dead letters (skipped events), newest first",
  positionals: [{ name: 'name', description: 'the consumer' }],
  options: {
    instance: INSTANCE_OPTION,
    limit: { type: 'string', value: 'n', description: 'at most this many (1–1000, default 100)' },
    json: JSON_OPTION,
  },
  notes: ["ID is the dead letter's id, which sluice replay --ids takes; EVENT is the event's id."],
  prepare({ args: [nameText = ''], options }) {
    const name = parseName(nameText, '<name>');
    const limitText = options.text('limit');
    const query = withoutUndefined({
      instanceId: optionalName(options.text('instance'), '--instance'),
      limit: limitText === undefined ? undefined : parseLimit(limitText),
    });
    const json = options.flag('json');
    return async (admin) => {
      const letters = await admin.listDeadLetters(name, query);
      if (json) return toJson(letters);
      if (letters.length === 0) return `no dead letters for ${name}`;
      return formatTable(COLUMNS, letters.map(row));
    };
  },
});

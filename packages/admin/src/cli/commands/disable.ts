import { defineCommand } from '../command.js';
import { INSTANCE_OPTION, JSON_OPTION, REASON_OPTION } from '../common-options.js';
import { consumerLabel } from '../format-action.js';
import { formatTime } from '../format-text.js';
import { optionalName, parseDurationMs, parseName, parseReason, parseTime } from '../parse-values.js';
import { toJson } from '../to-json.js';
import { UsageError } from '../usage-error.js';
import { withoutUndefined } from '../without-undefined.js';

/** `sluice disable <name>`: stops a consumer's turns, for good or until a time (disable). */
export const disableCommand = defineCommand({
  name: 'disable',
  summary: "stop a consumer's turns (its cursor waits, nothing is lost), for good or for a while",
  positionals: [{ name: 'name', description: 'the consumer' }],
  options: {
    for: {
      type: 'string',
      value: 'duration',
      description: 'enable again after this long: 90s, 30m, 2h, 1d, 1h30m',
    },
    until: {
      type: 'string',
      value: 'time',
      description: 'enable again at this ISO 8601 time with a zone, e.g. 2025-06-01T12:00:00Z',
    },
    reason: REASON_OPTION,
    instance: INSTANCE_OPTION,
    json: JSON_OPTION,
  },
  notes: ['--for and --until are mutually exclusive; without either it stays disabled until sluice enable.'],
  prepare({ args: [nameText = ''], options, actor }) {
    const name = parseName(nameText, '<name>');
    const forText = options.text('for');
    const untilText = options.text('until');
    if (forText !== undefined && untilText !== undefined) {
      throw new UsageError('--for and --until are mutually exclusive: give one of them');
    }
    // --for counts from the database's clock (the one dispatchers end the disable by), not this machine's.
    const forMs = forText !== undefined ? parseDurationMs(forText, '--for') : undefined;
    const until = untilText !== undefined ? parseTime(untilText, '--until') : undefined;
    const request = {
      actor,
      ...withoutUndefined({
        until,
        forMs,
        instanceId: optionalName(options.text('instance'), '--instance'),
        reason: parseReason(options.text('reason')),
      }),
    };
    const json = options.flag('json');
    return async (admin) => {
      const result = await admin.disable(name, request);
      if (json) return toJson(result);
      const label = consumerLabel(result.consumer, result.instanceId);
      const when = result.until === null ? 'until enabled again' : `until ${formatTime(result.until)}`;
      return `disabled ${label} ${when} (was ${result.statusBefore})`;
    };
  },
});

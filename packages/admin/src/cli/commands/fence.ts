import { defineCommand } from '../command.js';
import { INSTANCE_OPTION, JSON_OPTION, REASON_OPTION } from '../common-options.js';
import { consumerLabel } from '../format-action.js';
import { optionalName, parseEventIdText, parseName, parseReason } from '../parse-values.js';
import { toJson } from '../to-json.js';
import { withoutUndefined } from '../without-undefined.js';

/** `sluice fence <name> <event-id>`: gives up one pending gap id for good (fenceGap). */
export const fenceCommand = defineCommand({
  name: 'fence',
  summary: 'give up one pending gap id of a consumer for good (a tombstone takes the id)',
  positionals: [
    { name: 'name', description: 'the consumer' },
    {
      name: 'event-id',
      description: 'an id inside one of its pending gaps (sluice diagnose <name> shows the oldest)',
    },
  ],
  options: { instance: INSTANCE_OPTION, reason: REASON_OPTION, json: JSON_OPTION },
  notes: [
    'A late writer of the id then fails on the primary key instead of its event being skipped silently.',
    'Refused (exit 4) when the id is not a pending gap of the consumer, or while a transaction still owns it.',
  ],
  prepare({ args: [nameText = '', idText = ''], options, actor }) {
    const name = parseName(nameText, '<name>');
    const request = {
      eventId: parseEventIdText(idText, '<event-id>'),
      actor,
      ...withoutUndefined({
        instanceId: optionalName(options.text('instance'), '--instance'),
        reason: parseReason(options.text('reason')),
      }),
    };
    const json = options.flag('json');
    return async (admin) => {
      const result = await admin.fenceGap(name, request);
      if (json) return toJson(result);
      return (
        `fenced gap id ${result.eventId} of ${consumerLabel(result.consumer, result.instanceId)}: ` +
        'a tombstone holds it; every consumer waiting on it resolves it without a handler'
      );
    };
  },
});

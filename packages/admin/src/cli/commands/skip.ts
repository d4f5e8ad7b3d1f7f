import { defineCommand } from '../command.js';
import { INSTANCE_OPTION, JSON_OPTION, REASON_OPTION } from '../common-options.js';
import { consumerLabel, statusChange } from '../format-action.js';
import { optionalName, parseEventIdText, parseName, parseReason } from '../parse-values.js';
import { toJson } from '../to-json.js';
import { withoutUndefined } from '../without-undefined.js';

/** `sluice skip <name> --event <id>`: skips the event a consumer is stuck on (skip). */
export const skipCommand = defineCommand({
  name: 'skip',
  summary: 'skip the event a consumer is stuck on (it is copied to the dead letters)',
  positionals: [{ name: 'name', description: 'the consumer' }],
  options: {
    event: {
      type: 'string',
      value: 'id',
      description: 'the event it is stuck on (see sluice diagnose); any other id is refused',
      required: true,
    },
    instance: INSTANCE_OPTION,
    reason: REASON_OPTION,
    json: JSON_OPTION,
  },
  prepare({ args: [nameText = ''], options, actor }) {
    const name = parseName(nameText, '<name>');
    const request = {
      eventId: parseEventIdText(options.text('event'), '--event'),
      actor,
      ...withoutUndefined({
        instanceId: optionalName(options.text('instance'), '--instance'),
        reason: parseReason(options.text('reason')),
      }),
    };
    const json = options.flag('json');
    return async (admin) => {
      const result = await admin.skip(name, request);
      if (json) return toJson(result);
      return (
        `skipped event ${result.eventId} of ${consumerLabel(result.consumer, result.instanceId)}` +
        `${statusChange(result.statusBefore, result.statusAfter)}; copied to its dead letters, its next turn passes it`
      );
    };
  },
});

import { parseEventId } from '../../validate.js';
import { defineCommand } from '../command.js';
import { INSTANCE_OPTION, JSON_OPTION, REASON_OPTION } from '../common-options.js';
import { consumerLabel, statusChange } from '../format-action.js';
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
  async run({ admin, args: [name = ''], options, actor }) {
    const eventId = parseEventId(options.text('event'), '--event');
    const result = await admin.skip(name, {
      eventId,
      actor,
      ...withoutUndefined({ instanceId: options.text('instance'), reason: options.text('reason') }),
    });
    if (options.flag('json')) return toJson(result);
    return (
      `skipped event ${result.eventId} of ${consumerLabel(result.consumer, result.instanceId)}` +
      `${statusChange(result.statusBefore, result.statusAfter)}; copied to its dead letters, its next turn passes it`
    );
  },
});

import { defineCommand } from '../command.js';
import { INSTANCE_OPTION, JSON_OPTION, REASON_OPTION } from '../common-options.js';
import { consumerLabel } from '../format-action.js';
import { optionalName, parseName, parseReason } from '../parse-values.js';
import { toJson } from '../to-json.js';
import { withoutUndefined } from '../without-undefined.js';

/** `sluice enable <name>`: lets a disabled consumer run again; re-arms a dead one (enable). */
export const enableCommand = defineCommand({
  name: 'enable',
  summary: 'let a disabled consumer run again; on a dead one, re-arm it (attempts reset)',
  positionals: [{ name: 'name', description: 'the consumer' }],
  options: { instance: INSTANCE_OPTION, reason: REASON_OPTION, json: JSON_OPTION },
  prepare({ args: [nameText = ''], options, actor }) {
    const name = parseName(nameText, '<name>');
    const request = {
      actor,
      ...withoutUndefined({
        instanceId: optionalName(options.text('instance'), '--instance'),
        reason: parseReason(options.text('reason')),
      }),
    };
    const json = options.flag('json');
    return async (admin) => {
      const result = await admin.enable(name, request);
      if (json) return toJson(result);
      const label = consumerLabel(result.consumer, result.instanceId);
      return result.statusBefore === result.statusAfter
        ? `enabled ${label}: it was already ${result.statusAfter}`
        : `enabled ${label}: ${result.statusBefore} → ${result.statusAfter}`;
    };
  },
});

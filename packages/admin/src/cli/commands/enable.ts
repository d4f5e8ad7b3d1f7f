import { defineCommand } from '../command.js';
import { INSTANCE_OPTION, JSON_OPTION, REASON_OPTION } from '../common-options.js';
import { consumerLabel } from '../format-action.js';
import { toJson } from '../to-json.js';
import { withoutUndefined } from '../without-undefined.js';

/** `sluice enable <name>`: lets a disabled consumer run again; re-arms a dead one (enable). */
export const enableCommand = defineCommand({
  name: 'enable',
  summary: 'let a disabled consumer run again; on a dead one, re-arm it (attempts reset)',
  positionals: [{ name: 'name', description: 'the consumer' }],
  options: { instance: INSTANCE_OPTION, reason: REASON_OPTION, json: JSON_OPTION },
  async run({ admin, args: [name = ''], options, actor }) {
    const result = await admin.enable(name, {
      actor,
      ...withoutUndefined({ instanceId: options.text('instance'), reason: options.text('reason') }),
    });
    if (options.flag('json')) return toJson(result);
    const label = consumerLabel(result.consumer, result.instanceId);
    return result.statusBefore === result.statusAfter
      ? `enabled ${label}: it was already ${result.statusAfter}`
      : `enabled ${label}: ${result.statusBefore} → ${result.statusAfter}`;
  },
});

import { defineCommand } from '../command.js';
import { INSTANCE_OPTION, JSON_OPTION, REASON_OPTION } from '../common-options.js';
import { consumerLabel, statusChange } from '../format-action.js';
import { parseRestartFrom } from '../parse-values.js';
import { toJson } from '../to-json.js';
import { withoutUndefined } from '../without-undefined.js';

/** `sluice restart <name> --from …`: moves the cursor (restart). */
export const restartCommand = defineCommand({
  name: 'restart',
  summary: "move a consumer's cursor to the beginning, to now, or after an event id",
  positionals: [{ name: 'name', description: 'the consumer' }],
  options: {
    from: {
      type: 'string',
      value: 'beginning|now|id',
      description:
        "'beginning' (the oldest kept event), 'now' (the log head) or the event id after which to continue (0 = all)",
      required: true,
    },
    instance: INSTANCE_OPTION,
    reason: REASON_OPTION,
    json: JSON_OPTION,
  },
  notes: [
    'Clears attempts, pending gaps and the re-arm budget; a dead consumer becomes idle, a disabled one stays disabled.',
  ],
  async run({ admin, args: [name = ''], options, actor }) {
    const from = parseRestartFrom(options.text('from') ?? '');
    const result = await admin.restart(name, {
      from,
      actor,
      ...withoutUndefined({ instanceId: options.text('instance'), reason: options.text('reason') }),
    });
    if (options.flag('json')) return toJson(result);
    const stillDisabled =
      result.statusAfter === 'disabled' ? ' (still disabled: sluice enable to run it)' : '';
    return (
      `restarted ${consumerLabel(result.consumer, result.instanceId)}: ` +
      `cursor ${result.cursorBefore} → ${result.cursorAfter}${statusChange(result.statusBefore, result.statusAfter)}${stillDisabled}`
    );
  },
});

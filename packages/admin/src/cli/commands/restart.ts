import { defineCommand } from '../command.js';
import { INSTANCE_OPTION, JSON_OPTION, REASON_OPTION } from '../common-options.js';
import { consumerLabel, statusChange } from '../format-action.js';
import { optionalName, parseName, parseReason, parseRestartFrom } from '../parse-values.js';
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
        "'beginning' (every kept event), 'now' (the log head) or the event id after which to continue (0: all, if nothing was pruned)",
      required: true,
    },
    instance: INSTANCE_OPTION,
    reason: REASON_OPTION,
    json: JSON_OPTION,
  },
  notes: [
    'Clears attempts, pending gaps and the re-arm budget; a dead consumer becomes idle, a disabled one stays disabled.',
  ],
  prepare({ args: [nameText = ''], options, actor }) {
    const name = parseName(nameText, '<name>');
    const request = {
      from: parseRestartFrom(options.text('from') ?? ''),
      actor,
      ...withoutUndefined({
        instanceId: optionalName(options.text('instance'), '--instance'),
        reason: parseReason(options.text('reason')),
      }),
    };
    const json = options.flag('json');
    return async (admin) => {
      const result = await admin.restart(name, request);
      if (json) return toJson(result);
      const stillDisabled =
        result.statusAfter === 'disabled' ? ' (still disabled: sluice enable to run it)' : '';
      return (
        `restarted ${consumerLabel(result.consumer, result.instanceId)}: ` +
        `cursor ${result.cursorBefore} → ${result.cursorAfter}${statusChange(result.statusBefore, result.statusAfter)}${stillDisabled}`
      );
    };
  },
});

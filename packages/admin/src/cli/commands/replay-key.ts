import { defineCommand } from '../command.js';
import { JSON_OPTION, KEY_OPTION, REASON_OPTION } from '../common-options.js';
import { laneLabel } from '../format-action.js';
import { keyText } from '../format-text.js';
import { parseKey, parseName, parseReason } from '../parse-values.js';
import { toJson } from '../to-json.js';
import { withoutUndefined } from '../without-undefined.js';

/** `sluice replay-key <name> --key <key>`: delivers a parked key's events again (replayParkedKey). */
export const replayKeyCommand = defineCommand({
  name: 'replay-key',
  summary:
    "deliver a parked key's events again, in order, then let its later events flow (on its lane's next turn)",
  positionals: [{ name: 'name', description: 'the consumer' }],
  options: { key: KEY_OPTION, reason: REASON_OPTION, json: JSON_OPTION },
  notes: [
    'One attempt each, in id order; an event that fails again parks the key again from that event on.',
    'Exit 3 when the key is not parked (sluice parked lists the parked keys).',
  ],
  prepare({ args: [nameText = ''], options, actor }) {
    const name = parseName(nameText, '<name>');
    const request = {
      key: parseKey(options.text('key')),
      actor,
      ...withoutUndefined({ reason: parseReason(options.text('reason')) }),
    };
    const json = options.flag('json');
    return async (admin) => {
      const result = await admin.replayParkedKey(name, request);
      if (json) return toJson(result);
      const lane = laneLabel(result.lane);
      const turn = lane === undefined ? 'its next turn' : `the next turn of ${lane}, which owns the key,`;
      return (
        `replay requested for parked key ${keyText(result.key)} of ${result.consumer} (${result.events} event(s)); ` +
        `${turn} delivers them in id order`
      );
    };
  },
});

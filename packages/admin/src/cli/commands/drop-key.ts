import { defineCommand } from '../command.js';
import { JSON_OPTION, KEY_OPTION, REASON_OPTION } from '../common-options.js';
import { keyText } from '../format-text.js';
import { parseKey, parseName, parseReason } from '../parse-values.js';
import { toJson } from '../to-json.js';
import { withoutUndefined } from '../without-undefined.js';

/** `sluice drop-key <name> --key <key>`: gives a parked key up (dropParkedKey). */
export const dropKeyCommand = defineCommand({
  name: 'drop-key',
  summary: 'give a parked key up: its parked events are deleted, never delivered, and its later events flow',
  positionals: [{ name: 'name', description: 'the consumer' }],
  options: { key: KEY_OPTION, reason: REASON_OPTION, json: JSON_OPTION },
  notes: [
    'The audit keeps the key and how many events were dropped, not the events: sluice parked-events shows them first.',
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
      const result = await admin.dropParkedKey(name, request);
      if (json) return toJson(result);
      return (
        `dropped parked key ${keyText(result.key)} of ${result.consumer}: ` +
        `${result.events} parked event(s) deleted without delivery; its later events flow again`
      );
    };
  },
});

import { ConsumerNotFoundError, InvalidOptionError } from '@sluice/core';
import type { Admin } from '../../create-admin.js';
import { defineCommand } from '../command.js';
import { JSON_OPTION, REASON_OPTION } from '../common-options.js';
import { parseLaneCount, parseName, parseReason } from '../parse-values.js';
import { toJson } from '../to-json.js';
import { withoutUndefined } from '../without-undefined.js';

type LaneChangeRequest = Awaited<ReturnType<Admin['relane']>>;

const lanes = (n: number) => (n === 1 ? 'one lane' : `${n} lanes`);

function describe(r: LaneChangeRequest): string {
  switch (r.outcome) {
    case 'started':
      return (
        `changing ${r.consumer} from ${lanes(r.from)} to ${lanes(r.to)}: the old lanes deliver up to the barrier ` +
        `${r.barrier ?? '?'}, then the new lanes go on from there (sluice diagnose ${r.consumer} shows the change)`
      );
    case 'retargeted':
      return `the change of ${r.consumer} from ${lanes(r.from)}, not switched yet, now goes to ${lanes(r.to)} (barrier ${r.barrier ?? '?'})`;
    case 'cancelled':
      return `cancelled the change of ${r.consumer}: it stays at ${lanes(r.to)}`;
    case 'unchanged':
      return r.barrier === null
        ? `${r.consumer} already runs as ${lanes(r.to)}: nothing changed`
        : `${r.consumer} is already changing from ${lanes(r.from)} to ${lanes(r.to)} (barrier ${r.barrier}): nothing changed`;
  }
}

/** `sluice relane <name> --lanes <n>`: changes a consumer's lane count while it runs (relane). */
export const relaneCommand = defineCommand({
  name: 'relane',
  summary: "change a shared consumer's lane count while it runs (nothing lost, order per key kept)",
  positionals: [{ name: 'name', description: 'the consumer' }],
  options: {
    lanes: {
      type: 'string',
      value: 'n',
      description: 'the lane count to change to, 1–1024 (1: a single row, no lanes)',
      required: true,
    },
    reason: REASON_OPTION,
    json: JSON_OPTION,
  },
  notes: [
    'The old lanes deliver up to a barrier (the highest cursor among them), then the new lanes go on from there.',
    'A change not switched yet is retargeted, or cancelled when asked back to the old count; while a switched',
    'change still drains (its old lanes resolve their pending gaps), another is refused (exit 4).',
    'Give the application the new count too: a process started with another count asks for a change back to it.',
  ],
  prepare({ args: [nameText = ''], options, actor }) {
    const name = parseName(nameText, '<name>');
    const request = {
      lanes: parseLaneCount(options.text('lanes') ?? ''),
      actor,
      ...withoutUndefined({ reason: parseReason(options.text('reason')) }),
    };
    const json = options.flag('json');
    return async (admin) => {
      const result = await admin.relane(name, request).catch(async (error: unknown) => {
        // relane() reports a consumer without a shared row as an invalid option, one that does not
        // exist included: that one is "not found" (exit 3), as with every other command.
        if (
          error instanceof InvalidOptionError &&
          !(await admin.listConsumers()).some((c) => c.name === name)
        ) {
          throw new ConsumerNotFoundError(name);
        }
        throw error;
      });
      if (json) return toJson(result);
      return describe(result);
    };
  },
});

import { defineCommand } from '../command.js';
import { INSTANCE_OPTION, JSON_OPTION, REASON_OPTION } from '../common-options.js';
import { consumerLabel } from '../format-action.js';
import { optionalName, parseIdList, parseLimit, parseName, parseReason } from '../parse-values.js';
import { UsageError } from '../usage-error.js';
import { toJson } from '../to-json.js';
import { withoutUndefined } from '../without-undefined.js';

/** `sluice replay <name>`: asks for dead letters to be delivered again (replayDeadLetters). */
export const replayCommand = defineCommand({
  name: 'replay',
  summary: "deliver dead letters again through the consumer's handler (on its next turn)",
  positionals: [{ name: 'name', description: 'the consumer' }],
  options: {
    ids: {
      type: 'string',
      value: 'ids',
      description:
        'dead-letter ids (the ID column of sluice dead-letters), e.g. 4,7 (default: all not replayed yet)',
    },
    limit: {
      type: 'string',
      value: 'n',
      description: 'at most this many, oldest first (1–1000, default 100)',
    },
    'dry-run': { type: 'boolean', description: 'only count what would be replayed; change nothing' },
    instance: INSTANCE_OPTION,
    reason: REASON_OPTION,
    json: JSON_OPTION,
  },
  prepare({ args: [nameText = ''], options, actor }) {
    const name = parseName(nameText, '<name>');
    const idsText = options.text('ids');
    const limitText = options.text('limit');
    const ids = idsText === undefined ? undefined : parseIdList(idsText, '--ids');
    if (ids !== undefined && ids.length > 1000) throw new UsageError('--ids takes at most 1000 ids');
    // The API's default limit (100) would silently drop ids from a longer --ids list.
    const limit = limitText === undefined ? ids?.length : parseLimit(limitText);
    const request = {
      actor,
      dryRun: options.flag('dry-run'),
      ...withoutUndefined({
        ids,
        limit,
        instanceId: optionalName(options.text('instance'), '--instance'),
        reason: parseReason(options.text('reason')),
      }),
    };
    const json = options.flag('json');
    return async (admin) => {
      const result = await admin.replayDeadLetters(name, request);
      if (json) return toJson(result);
      const label = consumerLabel(result.consumer, result.instanceId);
      const listed = result.deadLetterIds.length > 0 ? ` (ids ${result.deadLetterIds.join(', ')})` : '';
      if (result.dryRun) return `dry run: would replay ${result.count} dead letter(s) of ${label}${listed}`;
      if (result.count === 0) return `nothing to replay for ${label}`;
      return `replay requested for ${result.count} dead letter(s) of ${label}${listed}; its next turn delivers them`;
    };
  },
});

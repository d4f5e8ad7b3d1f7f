import type { Diagnosis } from '../../diagnose.js';
import { defineCommand } from '../command.js';
import { INSTANCE_OPTION, JSON_OPTION } from '../common-options.js';
import { consumerLabel } from '../format-action.js';
import { formatFacts } from '../format-table.js';
import { formatAge, formatTime, oneLine } from '../format-text.js';
import { optionalName, parseName } from '../parse-values.js';
import { toJson } from '../to-json.js';
import { withoutUndefined } from '../without-undefined.js';

function facts(d: Diagnosis): [string, string][] {
  const c = d.consumer;
  const lines: [string, string][] = [
    ['consumer', consumerLabel(c.name, c.instanceId)],
    ['status', c.status],
    ['cursor', c.cursor.toString()],
    ['head', c.head.toString()],
    [
      'lag',
      `${c.lagEvents} event(s)${c.lagSeconds === null ? '' : `, oldest ${formatAge(c.lagSeconds)} old`}`,
    ],
    ['pending gaps', String(c.pendingGaps)],
    ['attempts', `${c.attempts}${c.stuckEventId === null ? '' : ` (on event ${c.stuckEventId})`}`],
  ];
  if (c.lastError !== null) {
    const resolved =
      c.lastErrorResolvedAt === null
        ? ''
        : c.lastErrorResolvedBy === null
          ? `; resolved, advancing again (last at ${formatTime(c.lastErrorResolvedAt)})`
          : `; resolved at ${formatTime(c.lastErrorResolvedAt)} (${c.lastErrorResolvedBy})`;
    lines.push(['last error', `${oneLine(c.lastError)} (at ${formatTime(c.lastErrorAt)}${resolved})`]);
  }
  if (c.status === 'disabled') {
    lines.push(['disabled until', c.disabledUntil === null ? 'enabled again' : formatTime(c.disabledUntil)]);
  }
  if (d.nextRearmAt !== null) lines.push(['next re-arm', formatTime(d.nextRearmAt)]);
  lines.push(
    ['dead letters', String(c.deadLetters)],
    ['last progress', formatTime(c.lastProgressAt)],
    ['last seen', formatTime(c.lastSeenAt)],
  );
  return lines;
}

/** `sluice diagnose <name>`: why a consumer is not moving (diagnose). */
export const diagnoseCommand = defineCommand({
  name: 'diagnose',
  summary: 'why a consumer is not moving: findings and key facts',
  positionals: [{ name: 'name', description: 'the consumer' }],
  options: { instance: INSTANCE_OPTION, json: JSON_OPTION },
  prepare({ args: [nameText = ''], options }) {
    const name = parseName(nameText, '<name>');
    const instance = withoutUndefined({ instanceId: optionalName(options.text('instance'), '--instance') });
    const json = options.flag('json');
    return async (admin) => {
      const diagnosis = await admin.diagnose(name, instance);
      if (json) return toJson(diagnosis);
      return [
        formatFacts(facts(diagnosis)),
        '',
        'findings:',
        ...diagnosis.findings.map((finding) => `- ${finding}`),
      ].join('\n');
    };
  },
});

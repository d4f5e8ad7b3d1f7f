import type { Diagnosis } from '../../diagnose.js';
import type { ConsumerSummary } from '../../read-models.js';
import { defineCommand } from '../command.js';
import { INSTANCE_OPTION, JSON_OPTION } from '../common-options.js';
import { consumerLabel, laneChangeText, laneLabel } from '../format-action.js';
import { formatFacts } from '../format-table.js';
import { formatAge, formatTime, oneLine } from '../format-text.js';
import { optionalName, parseName } from '../parse-values.js';
import { toJson } from '../to-json.js';
import { withoutUndefined } from '../without-undefined.js';

/** The lanes a summed-up diagnosis covers: `3`, or both counts while a change drains its old lanes. */
function laneCounts(lanes: readonly ConsumerSummary[]): string {
  const counts = [...new Set(lanes.map((l) => l.lane?.count ?? 1))];
  return counts.length === 1
    ? String(counts[0])
    : `${counts.join(' and ')} (old and new lanes while the change drains)`;
}

/** A lane's finding (`lane *1/3: …`) as `lane 1 of 3: …`. */
function laneFinding(finding: string): string {
  const match = /^lane (\S+): /.exec(finding);
  const lane = match?.[1] === undefined ? undefined : laneLabel(match[1]);
  return match === null || lane === undefined ? finding : `${lane}: ${finding.slice(match[0].length)}`;
}

function facts(d: Diagnosis): [string, string][] {
  const c = d.consumer;
  const lines: [string, string][] = [['consumer', consumerLabel(c.name, c.instanceId)]];
  if (c.lanes !== undefined) lines.push(['lanes', laneCounts(c.lanes)]);
  if (c.laneChange !== null) lines.push(['lane change', laneChangeText(c.laneChange)]);
  lines.push(
    ['status', c.status],
    ['cursor', c.cursor.toString()],
    ['head', c.head.toString()],
    [
      'lag',
      `${c.lagEvents} event(s)${c.lagSeconds === null ? '' : `, oldest ${formatAge(c.lagSeconds)} old`}`,
    ],
    ['pending gaps', String(c.pendingGaps)],
    ['attempts', `${c.attempts}${c.stuckEventId === null ? '' : ` (on event ${c.stuckEventId})`}`],
  );
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
  if (c.parkedKeys > 0) lines.push(['parked keys', `${c.parkedKeys} (sluice parked ${c.name})`]);
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
  notes: [
    'A consumer run as lanes is summed up (the most serious status, the lowest cursor, the sums of gaps and',
    "dead letters), with each lane's findings marked \"lane k of N\"; --instance '*k/N' diagnoses lane k alone.",
  ],
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
        ...diagnosis.findings.map((finding) => `- ${laneFinding(finding)}`),
      ].join('\n');
    };
  },
});

import type { Admin } from '../../create-admin.js';
import type { RebuildStatus } from '../../actions/rebuilds.js';
import { defineCommand } from '../command.js';
import { JSON_OPTION, REASON_OPTION } from '../common-options.js';
import { formatTable } from '../format-table.js';
import { formatTime } from '../format-text.js';
import { parseName, parseReason, parseVersion } from '../parse-values.js';
import { toJson } from '../to-json.js';
import { UsageError } from '../usage-error.js';
import { withoutUndefined } from '../without-undefined.js';

const ACTIONS = ['status', 'approve', 'pause', 'resume', 'abandon', 'drop'] as const;
type Action = (typeof ACTIONS)[number];

const COLUMNS = [
  { title: 'CONSUMER' },
  { title: 'LIVE', align: 'right' },
  { title: 'REBUILD', align: 'right' },
  { title: 'STATE' },
  { title: 'POSITION', align: 'right' },
  { title: 'HEAD', align: 'right' },
  { title: 'DONE', align: 'right' },
  { title: 'RATE', align: 'right' },
  { title: 'LEFT', align: 'right' },
  { title: 'STARTED' },
] as const;

function duration(seconds: number | null): string {
  if (seconds === null || !Number.isFinite(seconds)) return '-';
  if (seconds < 60) return `${Math.ceil(seconds)} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${Math.ceil(seconds % 60)} s`;
  return `${Math.floor(seconds / 3600)} h ${Math.ceil((seconds % 3600) / 60)} min`;
}

function row(s: RebuildStatus): string[] {
  const live = s.versions.find((v) => v.state === 'live');
  const r = s.rebuild;
  if (!r) {
    return [s.consumer, live ? String(live.version) : '-', '-', 'no rebuild', '-', '-', '-', '-', '-', '-'];
  }
  return [
    s.consumer,
    r.liveVersion === null ? '-' : String(r.liveVersion),
    String(r.version),
    r.state,
    r.position === null ? '-' : r.position.toString(),
    r.head.toString(),
    r.progress === null ? '-' : `${(r.progress * 100).toFixed(1)} %`,
    r.ratePerSecond === null ? '-' : `${Math.round(r.ratePerSecond)}/s`,
    r.state === 'waiting' ? 'approve' : duration(r.etaSeconds),
    formatTime(r.startedAt),
  ];
}

type Change = Awaited<ReturnType<Admin['approveRebuild']>>;

function describeChange(action: Action, c: Change): string {
  switch (c.state) {
    case 'live':
      return `${c.consumer} version ${c.version} is live`;
    case 'taking-over':
      return (
        `${c.consumer} version ${c.version} is taking over: the live version stopped at ${c.barrier?.toString() ?? '?'}; ` +
        `it goes live once the rebuild has reached it (sluice rebuild status ${c.consumer})`
      );
    default:
      return `${action === 'abandon' ? 'abandoned' : `${action}d`}: ${c.consumer} version ${c.version} is ${c.state}`;
  }
}

/** `sluice rebuild <action> [<name>]`: versions and rebuilds of consumers (docs/design.md §12). */
export const rebuildCommand = defineCommand({
  name: 'rebuild',
  summary:
    'rebuilds of versioned consumers: status, approve the takeover, pause, resume, abandon, drop a retired version',
  positionals: [
    { name: 'action', description: 'status, approve, pause, resume, abandon or drop' },
    {
      name: 'name',
      description:
        'the consumer, or <name>@v<N> for its version N (drop: required; else the one on its way); status without it: every versioned consumer',
      optional: true,
    },
  ],
  options: {
    force: {
      type: 'boolean',
      description: 'approve: even while the rebuild is further behind than it takes over within',
    },
    'drop-source': { type: 'boolean', description: "drop: drop the version's liveView source table too" },
    reason: REASON_OPTION,
    json: JSON_OPTION,
  },
  notes: [
    'status shows, per consumer, its live version and the version on its way: position (its lowest cursor), the',
    'log head, how much is done, its rate since it started and the time left at that rate (none while paused).',
    'approve stops the live version at a barrier; the new one goes live once it has reached it with no gap below',
    'it. Refused while it is further behind than it takes over within (its rebuild.takeover.withinEvents, else',
    '1,000), unless --force (exit 4). A version with side effects takes the rows over at once.',
    "pause and resume stop and restart the rebuild's rows; abandon removes them (the live version goes on).",
    "drop removes a retired version's consumer rows (and with --drop-source its liveView source table):",
    'sluice rebuild drop stats@v1.',
  ],
  prepare({ args: [actionText = '', nameText], options, actor }) {
    if (!(ACTIONS as readonly string[]).includes(actionText)) {
      throw new UsageError(`<action> must be one of ${ACTIONS.join(', ')}, got "${actionText}"`);
    }
    const action = actionText as Action;
    const versioned = nameText === undefined ? undefined : /^(.+)@v([0-9]+)$/.exec(nameText);
    const name =
      nameText === undefined
        ? undefined
        : parseName(versioned ? (versioned[1] as string) : nameText, '<name>');
    if (name === undefined && action !== 'status') {
      throw new UsageError(`missing <name> (see sluice rebuild --help)`);
    }
    const version = versioned ? parseVersion(versioned[2] as string, '<name>@v<N>') : undefined;
    if (action === 'drop' && version === undefined) {
      throw new UsageError('drop takes <name>@v<N>: the retired version to drop (see sluice rebuild --help)');
    }
    // Options of another action are refused, not ignored: an operator who typed them meant something.
    const misplaced = (
      [
        ['--force', options.flag('force') && action !== 'approve', 'approve'],
        ['--drop-source', options.flag('drop-source') && action !== 'drop', 'drop'],
        ['--reason', options.text('reason') !== undefined && action === 'status', 'a change'],
        ['<name>@v<N>', version !== undefined && action === 'status', 'a change'],
      ] as const
    ).find(([, given]) => given);
    if (misplaced) {
      throw new UsageError(
        `${misplaced[0]} is for ${misplaced[2]}, not ${action} (see sluice rebuild --help)`,
      );
    }
    const reason = parseReason(options.text('reason'));
    const json = options.flag('json');
    return async (admin) => {
      if (action === 'status') {
        const status = await admin.rebuildStatus(name);
        if (json) return toJson(status);
        if (status.length === 0)
          return name === undefined ? 'no versioned consumers' : `${name} declares no versions`;
        return formatTable(COLUMNS, status.map(row));
      }
      const target = name as string;
      if (action === 'drop') {
        const dropped = await admin.dropVersion(target, version as number, {
          actor,
          dropSource: options.flag('drop-source'),
          ...withoutUndefined({ reason }),
        });
        if (json) return toJson(dropped);
        return `dropped ${target} version ${dropped.version}: ${dropped.rows} consumer row(s)${dropped.dropped === null ? '' : `, ${dropped.dropped}`}`;
      }
      const common = { actor, ...withoutUndefined({ version, reason }) };
      const change =
        action === 'approve'
          ? await admin.approveRebuild(target, { ...common, force: options.flag('force') })
          : action === 'pause'
            ? await admin.pauseRebuild(target, common)
            : action === 'resume'
              ? await admin.resumeRebuild(target, common)
              : await admin.abandonRebuild(target, common);
      if (json) return toJson(change);
      return describeChange(action, change);
    };
  },
});

// @ts-check
// Rebuilds of versioned consumers (docs/design.md §12) as the Rebuilds panel shows them: which
// actions apply to a version on its way, how far it is from taking over, and what a consumer's
// versions read as. Pure functions of what `GET rebuilds` answers: no DOM, so a unit test runs them
// in Node.

/** @typedef {import('./types.js').RebuildProgress} RebuildProgress */
/** @typedef {import('./types.js').RebuildStatus} RebuildStatus */
/** @typedef {import('./types.js').VersionChange} VersionChange */

/** @typedef {'approve' | 'pause' | 'resume' | 'abandon'} RebuildAction */

/** The actions on a rebuild in the order the panel offers them. @type {readonly RebuildAction[]} */
export const REBUILD_ACTIONS = ['approve', 'pause', 'resume', 'abandon'];

/** @type {Record<RebuildAction, string>} */
export const REBUILD_ACTION_NAMES = {
  approve: 'Approve',
  pause: 'Pause',
  resume: 'Resume',
  abandon: 'Abandon',
};

/**
 * How far behind the head an approval is accepted without force when the version declares no
 * `rebuild.takeover.withinEvents` (the server's APPROVE_WITHIN_DEFAULT).
 */
export const APPROVE_WITHIN_DEFAULT = 1000n;

/** "1 event", "12 events". @param {bigint | string | number} count */
function events(count) {
  return `${count} ${String(count) === '1' ? 'event' : 'events'}`;
}

/** A decimal id string as a bigint, null when it is none. @param {string | null | undefined} text */
function big(text) {
  return typeof text === 'string' && /^[0-9]+$/.test(text) ? BigInt(text) : null;
}

/**
 * The actions that apply to a version on its way, in display order: Approve while it rebuilds or
 * waits (side effects), Pause only while it rebuilds, Resume only while paused, Abandon in any of
 * these states and while it takes over (the live version then goes on). The server refuses the
 * others (409 SLUICE_REBUILD_STATE).
 * @param {RebuildProgress} r
 * @returns {RebuildAction[]}
 */
export function rebuildActions(r) {
  /** @type {Record<RebuildAction, boolean>} */
  const applies = {
    approve: r.state === 'rebuilding' || r.state === 'waiting',
    pause: r.state === 'rebuilding',
    resume: r.state === 'paused',
    abandon: ['rebuilding', 'paused', 'waiting', 'taking-over'].includes(r.state),
  };
  return REBUILD_ACTIONS.filter((action) => applies[action]);
}

/** How far behind the head an approval is accepted without force. @param {RebuildProgress} r */
export function approveWithin(r) {
  return big(r.takeoverWithin) ?? APPROVE_WITHIN_DEFAULT;
}

/**
 * How many events the rebuild is behind the head: its lag, else head − position; null for a version
 * with side effects (it has no rows of its own).
 * @param {RebuildProgress} r
 */
export function behind(r) {
  const lag = big(r.lagEvents);
  if (lag !== null) return lag;
  const head = big(r.head);
  const position = big(r.position);
  return head === null || position === null ? null : head > position ? head - position : 0n;
}

/**
 * The progress bar's percentage, rounded down (100 only once it is at the head); null without one.
 * @param {RebuildProgress} r
 */
export function progressPercent(r) {
  if (typeof r.progress !== 'number' || !Number.isFinite(r.progress)) return null;
  const percent = Math.floor(Math.min(1, Math.max(0, r.progress)) * 100);
  return percent === 100 && behind(r) !== 0n ? 99 : percent;
}

/** `version 2 of stats`. @param {{ consumer: string, version: number }} r */
export function versionLabel(r) {
  return `version ${r.version} of ${r.consumer}`;
}

/**
 * Where the rebuild stands with respect to its takeover, in one sentence.
 * @param {RebuildProgress} r
 * @returns {string}
 */
export function takeoverNote(r) {
  const live = r.liveVersion ?? null;
  const old = live === null ? 'the live version' : `version ${live}`;
  switch (r.state) {
    case 'waiting':
      return (
        `Has side effects, so it is not rebuilt: once approved it takes the rows over where ${old} ` +
        'is, and nothing is sent twice.'
      );
    case 'paused':
      return 'Paused: its rows wait until it is resumed; the live version goes on.';
    case 'taking-over':
      return (
        `Taking over: ${old} stopped at event ${r.barrier ?? '?'}; version ${r.version} becomes live ` +
        'once it has reached it with no pending gap below.'
      );
    case 'rebuilding': {
      const within = approveWithin(r);
      const lag = behind(r);
      const auto = big(r.takeoverWithin) !== null;
      if (lag !== null && lag <= within) {
        return auto
          ? `Within ${events(within)} of the head: it takes over by itself.`
          : `Within ${events(within)} of the head: ready to approve.`;
      }
      return auto
        ? `Takes over by itself once within ${events(within)} of the head.`
        : `Approve once it is within ${events(within)} of the head (an approval before needs force).`;
    }
    default:
      return `Version ${r.version} is ${r.state}.`;
  }
}

/**
 * A consumer's versions when none is on its way, newest first: "v2 live, v1 retired". Only the live
 * one and the retired ones whose data is still kept (dropped and abandoned ones are left out); null
 * when there is nothing to say beyond a live version.
 * @param {RebuildStatus} s
 * @returns {string | null}
 */
export function versionsNote(s) {
  const shown = s.versions
    .filter((v) => v.state === 'live' || v.state === 'retired')
    .sort((a, b) => b.version - a.version);
  if (!shown.some((v) => v.state === 'retired')) return null;
  return shown.map((v) => `v${v.version} ${v.state}`).join(', ');
}

/**
 * What an accepted action on a rebuild did, in words.
 * @param {RebuildAction} action @param {VersionChange} change @param {RebuildProgress} r
 */
export function describeChange(action, change, r) {
  const label = versionLabel(change);
  const old =
    r.liveVersion === null || r.liveVersion === undefined ? 'the live version' : `version ${r.liveVersion}`;
  if (change.state === 'live') return `Approved: ${label} is live.`;
  if (change.state === 'taking-over') {
    return (
      `Approved: ${label} is taking over. ${old[0]?.toUpperCase()}${old.slice(1)} stopped at event ` +
      `${change.barrier ?? '?'}; ${label} becomes live once it has reached it.`
    );
  }
  if (action === 'abandon') {
    const what = r.sideEffects ? 'it will not take over' : 'its rows are removed';
    return `Abandoned ${label}: ${what} and it is not run again; ${old} goes on.`;
  }
  if (action === 'pause') return `Paused the rebuild of ${label}: its rows wait until it is resumed.`;
  if (action === 'resume') return `Resumed the rebuild of ${label}.`;
  return `${label} is ${change.state}.`;
}

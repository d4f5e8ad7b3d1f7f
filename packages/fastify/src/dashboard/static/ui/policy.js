// @ts-check
// Which operator actions apply to a consumer row, and whether its last error is still current.
// Pure functions of what `GET consumers` answers: no DOM, so a unit test runs them in Node.

/** @typedef {import('./types.js').ConsumerSummary} ConsumerSummary */

/** @typedef {'restart' | 'disable' | 'enable' | 'skip' | 'replay' | 'fence'} WriteAction */

/** The write actions in the order the dashboard offers them. @type {readonly WriteAction[]} */
export const WRITE_ACTIONS = ['skip', 'enable', 'disable', 'replay', 'fence', 'restart'];

/**
 * Whether the consumer is stuck on an event: retrying it, or dead on it. That is the one event
 * `skip` accepts (the server refuses any other).
 * @param {ConsumerSummary} c
 */
export function isStuck(c) {
  return Boolean(c.stuckEventId) && (c.attempts > 0 || c.status === 'dead');
}

/**
 * The write actions that apply to a consumer row right now, in display order: Skip only while it
 * is stuck, Enable only when disabled or dead (offered as Re-arm: see actionLabel), Disable only when not
 * disabled, Replay only with dead letters waiting, Fence only with pending gaps, Restart always.
 * @param {ConsumerSummary} c
 * @returns {WriteAction[]}
 */
export function applicableActions(c) {
  /** @type {Record<WriteAction, boolean>} */
  const applies = {
    skip: isStuck(c),
    enable: c.status === 'disabled' || c.status === 'dead',
    disable: c.status !== 'disabled',
    replay: (c.deadLetters ?? 0) > 0,
    fence: c.pendingGaps > 0,
    restart: true,
  };
  return WRITE_ACTIONS.filter((action) => applies[action]);
}

/**
 * The label of a write action's button: Enable on a dead consumer is offered as Re-arm (the same
 * request, which re-arms it by hand); every other action keeps its name.
 * @param {WriteAction} action
 * @param {ConsumerSummary} c
 * @returns {string}
 */
export function actionLabel(action, c) {
  if (action === 'enable' && c.status === 'dead') return 'Re-arm';
  return ACTION_NAMES[action];
}

/** @type {Record<WriteAction, string>} */
const ACTION_NAMES = {
  skip: 'Skip',
  enable: 'Enable',
  disable: 'Disable',
  replay: 'Replay',
  fence: 'Fence',
  restart: 'Restart',
};

/**
 * The state of the row's last error: none, current (the consumer is failing, or has not moved
 * since), or resolved (the server's `lastErrorResolvedAt`: the cursor advanced after the error and
 * the consumer is neither retrying, dead nor disabled).
 * @param {ConsumerSummary} c
 * @returns {'none' | 'current' | 'resolved'}
 */
export function errorState(c) {
  if (!c.lastError) return 'none';
  return c.lastErrorResolvedAt ? 'resolved' : 'current';
}

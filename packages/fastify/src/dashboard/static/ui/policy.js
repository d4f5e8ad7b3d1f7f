// @ts-check
// Which operator actions apply to a consumer row, whether its last error is still current, and how
// a lane row, a lane change and parked keys read. Pure functions of what `GET consumers` answers: no DOM, so a unit test runs them in Node.

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
 * Whether the row says the consumer is retrying: a failed attempt on record, and neither dead nor
 * disabled (a disabled consumer keeps its attempts for when it is enabled again).
 * @param {ConsumerSummary} c
 */
export function isRetrying(c) {
  return c.status !== 'dead' && c.status !== 'disabled' && c.attempts > 0;
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

/** @typedef {import('./types.js').Lane} Lane */

/** A lane's instance id: `*k/N`, lane k (0 … N − 1) of N (docs/design.md §11.1). */
const LANE_ID = /^\*(0|[1-9]\d{0,3})\/([1-9]\d{0,3})$/;

/**
 * The lane a row is when its consumer runs as several lanes: the server's `lane`, else read from
 * the instance id `*k/N`. Null for a consumer of one lane (`*`, lane 0 of 1) and a per-instance row.
 * @param {{ instanceId: string, lane?: Lane | null }} c
 * @returns {Lane | null}
 */
export function laneOf(c) {
  let lane = c.lane ?? null;
  if (!lane) {
    const match = LANE_ID.exec(c.instanceId);
    lane = match ? { index: Number(match[1]), count: Number(match[2]) } : null;
  }
  return lane && lane.count > 1 && lane.index < lane.count ? lane : null;
}

/**
 * How a lane row is named: "lane 1 of 3" (its instance id is `*1/3`), or null for any other row.
 * @param {{ instanceId: string, lane?: Lane | null }} c
 * @returns {string | null}
 */
export function laneLabel(c) {
  const lane = laneOf(c);
  return lane ? `lane ${lane.index} of ${lane.count}` : null;
}

/**
 * A change of the consumer's lane count in progress, in words: "re-laning 4 → 16, barrier 1234",
 * then "…, switched: old lanes draining" once the new lanes run and the old ones resolve their
 * pending gaps below the barrier. Null when there is none.
 * @param {ConsumerSummary} c
 * @returns {string | null}
 */
export function laneChangeNote(c) {
  const change = c.laneChange;
  if (!change) return null;
  const note = `re-laning ${change.from} → ${change.to}, barrier ${change.barrier}`;
  return change.switched ? `${note}, switched: old lanes draining` : note;
}

/**
 * The consumer's parked keys (every lane row of a consumer says the same count). The row offers
 * its Parked keys panel only when there are some.
 * @param {ConsumerSummary} c
 */
export function parkedKeyCount(c) {
  const count = c.parkedKeys ?? 0;
  return Number.isSafeInteger(count) && count > 0 ? count : 0;
}

/**
 * Parked keys over a poll's rows: each consumer counted once, however many lane rows it has.
 * @param {readonly ConsumerSummary[]} consumers
 */
export function totalParkedKeys(consumers) {
  /** @type {Map<string, number>} */
  const byName = new Map();
  for (const c of consumers) byName.set(c.name, Math.max(byName.get(c.name) ?? 0, parkedKeyCount(c)));
  let total = 0;
  for (const count of byName.values()) total += count;
  return total;
}

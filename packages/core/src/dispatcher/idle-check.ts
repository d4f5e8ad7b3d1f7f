import { lowestEnded, parseSnapshot, parseXidList, type Snapshot } from '../gaps/snapshot.js';
import type { ResolvedConsumer } from '../options.js';
import type { ConsumerStateRow, Precheck } from '../queries/consumers.js';
import { isWaitingToRetry, retryStateOf } from './backoff.js';
import { rearmDecision } from './rearm.js';

/**
 * Whether a consumer provably has nothing to do (docs/design.md §4.1), judged from its row, the log head
 * and one snapshot, without a lock or a transaction of its own:
 * - disabled (and not due to re-enable), or dead and not re-armable yet;
 * - its cursor is at the head (strict ordering: or waits at a hole that cannot resolve yet);
 * - its pending ranges cannot resolve yet: all fenced, none burnable (xmin has not passed a fence),
 *   none flagged for a recheck, and every transaction watched since the last check still runs.
 */
export function isProvablyIdle(
  row: ConsumerStateRow,
  consumer: ResolvedConsumer,
  head: bigint,
  snapshot: Snapshot,
  now: Date,
  rules: { rearmCooldownMs: number; maxRearmCount: number; retryDelayMs: number; retryMaxDelayMs: number },
  systemIdentifier: string | null = null,
): boolean {
  if (row.status === 'disabled') return row.disabled_until === null || row.disabled_until > now;
  if (row.status === 'dead') {
    return (
      rearmDecision({ rearmCount: row.rearm_count, lastWriteAt: row.updated_at }, now, rules) !== 'rearm'
    );
  }
  if (row.start_fence !== null && snapshot.xmin > BigInt(row.start_fence)) return false;
  // Waiting before retrying a failed event: nothing to do until then (the turn checks it too).
  if (isWaitingToRetry(retryStateOf(row), now, rules) && row.skip_event_id === null && !row.replays_pending)
    return true;
  // An operator skipped an event or asked for replays: the next turn acts on it.
  if (row.skip_event_id !== null || row.replays_pending) return false;
  // Gaps fenced on another cluster (a restore): the next turn resolves them.
  if (
    row.gap_count > 0 &&
    systemIdentifier !== null &&
    row.system_identifier !== null &&
    row.system_identifier !== systemIdentifier
  ) {
    return false;
  }
  const gapsSettled = row.gap_count === 0 || gapsCannotChange(row, snapshot);
  const cursor = BigInt(row.cursor);
  if (cursor < head) {
    // Strict ordering waits at its hole: new events above it change nothing until the hole resolves.
    return consumer.ordering === 'strict' && row.gap_count > 0 && gapsSettled;
  }
  return gapsSettled;
}

function gapsCannotChange(row: ConsumerStateRow, snapshot: Snapshot): boolean {
  if (row.gaps_unfenced > 0 || row.gaps_recheck) return false;
  if (row.gap_min_fence !== null && BigInt(row.gap_min_fence) < snapshot.xmin) return false;
  return lowestEnded(parseXidList(row.gap_watch), snapshot) === null;
}

/**
 * Whether a pre-check may stand for the next ones while the snapshot does not change. The rows it
 * did not find trivially caught up must be judged without the clock: not disabled or dead (re-enable
 * and re-arm are due at a time), no failed attempt (retry delay), not behind the head (its lag in
 * seconds grows). Their one clock-based gauge, the age of the oldest gap, moves on with the local clock.
 */
export function canStand(precheck: Precheck): boolean {
  for (const row of precheck.rows.values()) {
    if (row.status !== 'idle' && row.status !== 'processing') return false;
    if (row.attempts !== 0 || BigInt(row.cursor) < BigInt(row.head)) return false;
  }
  return true;
}

/**
 * A consumer a commit can only put behind: idle or processing, no failed attempt, no pending gap,
 * no operator skip or replay, no start fence. Its next turn delivers the events after its cursor.
 */
export function isPlain(row: ConsumerStateRow): boolean {
  return (
    (row.status === 'idle' || row.status === 'processing') &&
    row.attempts === 0 &&
    row.gap_count === 0 &&
    row.skip_event_id === null &&
    !row.replays_pending &&
    row.start_fence === null
  );
}

export { parseSnapshot };

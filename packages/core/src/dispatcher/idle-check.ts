import { lowestEnded, parseSnapshot, parseXidList, type Snapshot } from '../gaps/gaps.js';
import type { ResolvedConsumer } from '../options.js';
import type { ConsumerStateRow, Precheck, PrecheckRow } from '../queries/consumers.js';
import type { PassResult } from './pass.js';
import { isWaitingToRetry, rearmDecision, retryStateOf } from '../consumer-state/consumer-state.js';

/**
 * Whether a consumer provably has nothing to do (docs/design.md §4.1), judged from its row, the log head
 * and one snapshot, without a lock or a transaction of its own:
 * - disabled (and not due to re-enable), or dead and not re-armable yet;
 * - its cursor is at the head (strict ordering: or waits at a hole that cannot resolve yet);
 * - its pending ranges cannot resolve yet: all fenced, none burnable (xmin has not passed a fence),
 *   none flagged for a recheck, and every transaction watched since the last check still runs.
 */
export function isProvablyIdle(
  row: PrecheckRow,
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
  // An old lane of a change of lane count drains to its barrier, hands over and goes: every pass.
  if (row.lane_changing) return false;
  if (row.start_fence !== null && snapshot.xmin > BigInt(row.start_fence)) return false;
  // Waiting before retrying a failed event: nothing to do until then (the turn checks it too).
  if (
    isWaitingToRetry(retryStateOf(row), now, rules) &&
    row.skip_event_id === null &&
    !row.replays_pending &&
    !row.parked_replays
  )
    return true;
  // An operator skipped an event or asked for replays (of dead letters or parked keys): the next
  // turn acts on it.
  if (row.skip_event_id !== null || row.replays_pending || row.parked_replays) return false;
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
    // (Ranges behind the cursor, left by fast ordering before a restart, hold nothing up.)
    return consumer.ordering === 'strict' && row.waits_at_hole && gapsSettled;
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
export function isPlain(row: PrecheckRow): boolean {
  return (
    (row.status === 'idle' || row.status === 'processing') &&
    row.attempts === 0 &&
    row.gap_count === 0 &&
    row.skip_event_id === null &&
    !row.replays_pending &&
    row.start_fence === null &&
    !row.lane_changing &&
    !row.parked_replays
  );
}

export { parseSnapshot };

/**
 * What a dispatcher process knows of its consumers between passes, and when it stops knowing it
 * (docs/design.md §4.1). Every pass may use this to skip work (a pre-check, a judgement of each
 * consumer, the turn's separate fetch); every event that could make it wrong goes through one of
 * the methods below, so the rules that keep it honest live in one place.
 */
/** NOTIFY-woken passes that may launch turns without a delivery before NOTIFYs go back to pre-checking. */
export const EMPTY_NOTIFY_PASSES = 3;

export class IdleKnowledge {
  /**
   * The last pre-check the server answered in full, when it can stand for the next ones while the
   * cluster's snapshot does not change: every row it holds is judged the same way later (no clock
   * in it). Undefined otherwise.
   */
  #standing: Precheck | undefined;
  /**
   * The last pass that found every consumer idle and started no turn, with the pre-check it judged:
   * while that pre-check stands, the next passes would find the same, and return its result without
   * judging each consumer again (an idle process then allocates next to nothing per tick).
   */
  #allIdle: { readonly precheck: Precheck; readonly result: PassResult } | undefined;
  /**
   * When the last full pre-check was read (performance.now()), if it found every consumer plain:
   * caught up, or behind with nothing but events to deliver (see {@link isPlain}). A commit only
   * puts plain consumers behind, where every one of them needs a turn: a pass woken by a commit,
   * within a poll interval of it, launches those turns at once instead of asking again (one round
   * trip less between a commit and its handlers). Undefined when a consumer was not plain, or since
   * a turn failed or found its consumer otherwise; older than a poll interval, the pass asks again,
   * so the gauges and the clock-based decisions never lag behind by more than polling would.
   */
  #plainAtMs: number | undefined;
  /**
   * Each consumer's row as this process's last committed turn left it (its xmin), while no turn of
   * it failed since: a clean view (see cleanViewOf in consumer-state.ts).
   */
  readonly #lastWrites = new Map<string, bigint>();
  /** Each consumer's cursor as last read or settled, while it has no pending gap: the turn's early fetch. */
  readonly #cursors = new Map<string, bigint>();

  /** The pre-check that may stand for this tick's, if the cluster's snapshot still matches it. */
  get standing(): Precheck | undefined {
    return this.#standing;
  }

  /**
   * NOTIFY-woken passes that skipped the pre-check since a turn last delivered. Anyone who can
   * connect may send a NOTIFY: after {@link EMPTY_NOTIFY_PASSES} of them, a NOTIFY costs a
   * lock-free pre-check again, not a turn per consumer, until some turn delivers (docs/reliability.md#x6).
   * Counted when the pass starts its turns, not when they end: under a flood, a running turn takes
   * one more turn for every pass that asked meanwhile, and would not end while the flood lasts.
   */
  #notifyPasses = 0;

  /**
   * A pass woken by a commit may launch its turns without a pre-check: a commit of this process,
   * or a NOTIFY while NOTIFYs have not kept waking passes for nothing.
   */
  canSkipPrecheck(wake: 'local' | 'notify', nowMs: number, pollIntervalMs: number): boolean {
    if (wake === 'notify' && this.#notifyPasses >= EMPTY_NOTIFY_PASSES) return false;
    return this.#plainAtMs !== undefined && nowMs - this.#plainAtMs < pollIntervalMs;
  }

  /** A NOTIFY-woken pass launches its turns without a pre-check. */
  notifySkippedPrecheck(): void {
    this.#notifyPasses += 1;
  }

  /** A turn delivered events: NOTIFYs are worth a turn again. */
  delivered(): void {
    this.#notifyPasses = 0;
  }

  /** The cursor a consumer's next turn may fetch from before it holds its row (it checks it then). */
  cursorOf(name: string): bigint | undefined {
    return this.#cursors.get(name);
  }

  /**
   * A full pre-check was read: it replaces what was known. `consumers`: the rows the process turns
   * (each consumer's own row, or each of its lanes), known by their unit key.
   */
  precheckRead(precheck: Precheck, consumers: readonly ResolvedConsumer[], nowMs: number): void {
    this.#standing = canStand(precheck) ? precheck : undefined;
    let plain = true;
    for (const consumer of consumers) {
      const row = precheck.rows.get(consumer.unit);
      if (row) {
        this.#setCursor(consumer.unit, row.gap_count === 0 ? BigInt(row.cursor) : undefined);
        if (!isPlain(row)) plain = false;
      } else if (precheck.quiet.has(consumer.unit)) {
        this.#cursors.set(consumer.unit, BigInt(precheck.head));
      } else {
        this.#cursors.delete(consumer.unit);
        plain = false;
      }
    }
    this.#plainAtMs = plain ? nowMs : undefined;
  }

  /**
   * The cluster's snapshot has not changed since the standing pre-check: only the clock moved on,
   * and a plain finding nothing has withdrawn since is as fresh as this tick (so local wake-ups
   * after a quiet spell still skip the pre-check).
   */
  precheckStands(nowMs: number): void {
    if (this.#plainAtMs !== undefined) this.#plainAtMs = nowMs;
  }

  /** The pre-check failed: nothing is proven idle or plain until one works again. */
  precheckFailed(): void {
    this.#standing = undefined;
    this.#plainAtMs = undefined;
  }

  /** The result of the last all-idle pass, while it was judged on `precheck`. */
  allIdleOn(precheck: Precheck | undefined): PassResult | undefined {
    const allIdle = this.#allIdle;
    return allIdle !== undefined && allIdle.precheck === precheck ? allIdle.result : undefined;
  }

  /** A pass judged every consumer: `result` when all were idle on `precheck`, else nothing to remember. */
  passJudged(precheck: Precheck | undefined, result: PassResult | undefined): void {
    this.#allIdle = precheck !== undefined && result !== undefined ? { precheck, result } : undefined;
  }

  /**
   * A turn of `name` ended. `cursor`: where it left the consumer when it has no pending gap.
   * `plain`: it delivered or found nothing unusual (no failure, gap, dead or skipped row).
   */
  turnEnded(name: string, cursor: bigint | undefined, plain: boolean): void {
    this.#setCursor(name, cursor);
    if (!plain) this.#plainAtMs = undefined;
  }

  /** A turn failed, or the consumer's row was re-created: its cursor, plainness and row are unknown. */
  forget(name: string): void {
    this.#cursors.delete(name);
    this.#lastWrites.delete(name);
    this.#plainAtMs = undefined;
  }

  /** The row's xmin as this process's last committed turn of `name` left it, if it has a clean view. */
  lastWriteOf(name: string): bigint | undefined {
    return this.#lastWrites.get(name);
  }

  /**
   * A turn of `name` committed: it wrote the row (its xmin now), wrote nothing (the row is as it
   * was), or recorded a failure (no clean view until a turn commits without one).
   */
  turnCommitted(name: string, wrote: bigint | 'failed' | undefined): void {
    if (wrote === 'failed') this.#lastWrites.delete(name);
    else if (wrote !== undefined) this.#lastWrites.set(name, wrote);
  }

  #setCursor(name: string, cursor: bigint | undefined): void {
    if (cursor === undefined) this.#cursors.delete(name);
    else this.#cursors.set(name, cursor);
  }
}

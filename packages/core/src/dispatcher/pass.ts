import { context, ROOT_CONTEXT, type Tracer } from '@opentelemetry/api';
import { messageOf } from '../errors.js';
import { parseSnapshot, type Snapshot } from '../gaps/gaps.js';
import type { Logger } from '../logger.js';
import {
  attemptsCharged,
  laneOf,
  SHARED_INSTANCE_ID,
  type ResolvedConsumer,
  type ResolvedOptions,
} from '../options.js';
import {
  keptByAnotherKey,
  laneInstanceIds,
  laneKeyOption,
  laneKeyText,
  parseLaneInstanceId,
} from '../lanes/lanes.js';
import {
  currentSnapshot,
  heartbeat,
  precheckConsumers,
  reregisterConsumer,
  precheckKeys,
  recordFailedAttempt,
  recordInfraFailure,
  type Precheck,
  type PrecheckKeys,
  type PrecheckRow,
  type FailedTurn,
  unitKey,
} from '../queries/consumers.js';
import type { Tables } from '../schema/tables.js';
import type { ConsumerGauges, DispatcherMetrics } from '../telemetry/metrics.js';
import { settleWithin, TIMED_OUT } from '../time-limit.js';
import { isWaitingToRetry, rearmDecision, retryStateOf } from '../consumer-state/consumer-state.js';
import { isBackingOff, nextBackoff, type BackoffState } from './backoff.js';
import { classifyFailure, poolerHint } from './classify-failure.js';
import { IdleKnowledge, isProvablyIdle } from './idle-check.js';
import { LaneReads } from './lane-reads.js';
import { SharedReads } from './shared-reads.js';
import { VersionKeeper } from './versions-step.js';
import { TurnSlots, type TurnConnections } from './slots.js';
import type { OwnConnections } from '../connections/own-connections.js';
import type { Sql } from '../sql-types.js';
import {
  runTurn,
  type SkipReason,
  type TurnEnvironment,
  type TurnOutcome,
  type TurnProgress,
} from './turn.js';

export type ConsumerSkip =
  | 'idle'
  | 'locked'
  | 'disabled'
  | 'dead'
  | 'missing'
  | 'feature-off'
  | 'backoff'
  | 'retry-later'
  | 'failed'
  | 'version'
  | 'other-key'
  | 'stopping';

export interface ConsumerPassResult {
  readonly processed: number;
  readonly failed: number;
  /** Why no turn delivered anything: idle, held by another instance, disabled, dead, … */
  readonly skipped: ConsumerSkip | undefined;
  readonly pendingGaps: number;
  /** Its cursor is below the log head. */
  readonly behind: boolean;
  /** A consumer run as lanes: each lane's result, by the lane's instance id ('*k/N'). */
  readonly lanes?: Readonly<Record<string, ConsumerPassResult>>;
}

export interface PassResult {
  readonly processed: number;
  readonly failed: number;
  readonly byConsumer: Readonly<Record<string, ConsumerPassResult>>;
}

export interface PassEnvironment {
  readonly options: ResolvedOptions;
  /** The pools turns run on, one per turn running at once. */
  readonly turnConnections: TurnConnections;
  readonly tables: Tables;
  readonly metrics: DispatcherMetrics;
  readonly tracer: Tracer;
  readonly logger: Logger;
  readonly systemIdentifier: () => string | null;
  readonly isStopping: () => boolean;
  /** The cluster's snapshot asked on the LISTEN connection; undefined when it cannot answer now. */
  readonly listenerSnapshot: () => Promise<string> | undefined;
  /** The pool of pre-checks, turn starts and bookkeeping (`options.sql` is its handle). */
  readonly own: Pick<OwnConnections, 'answered'>;
}

/**
 * One pass (docs/design.md §4.1): the idle pre-check for every consumer of this process in one lock-free
 * statement, then a turn for each consumer that may have work, within the concurrency slots.
 */
export class PassRunner {
  readonly #env: PassEnvironment;
  readonly #slots: TurnSlots<ConsumerPassResult>;
  readonly #backoff = new Map<string, BackoffState>();
  readonly #rearmExhaustedReported = new Set<string>();
  /** Consumers whose rows another deployment keeps by another lane key, reported once each. */
  readonly #otherKeyReported = new Set<string>();
  /** Each consumer's next batch limit: grows while turns fill their batch (catching up). */
  readonly #limits = new Map<string, number>();
  /**
   * Consumers a pass asked for while their turns were running: the running turn may have fetched
   * before the event that woke the pass (or that a runOnce() caller awaits) committed, so it takes
   * one more turn, which a caller joining the running turn awaits too.
   */
  readonly #askedAgain = new Set<string>();
  readonly #precheckKeys: PrecheckKeys;
  /** One read per batch for consumers turning from the same cursor, and the read-ahead. */
  readonly #reads: SharedReads;
  readonly #laneReads = new LaneReads(LANE_READS, SHARED_READ_MAX_AGE_MS);
  /** Which declared versions run here, and the takeovers this process drives (docs/design.md §12). */
  readonly versions: VersionKeeper;
  #precheckFailing = false;
  /** What is known of the consumers between passes (standing pre-check, plainness, cursors). */
  readonly #known = new IdleKnowledge();
  /** Whether some consumer runs only while its feature is enabled (decided per pass, by the app). */
  readonly #featureGated: boolean;
  #lastHeartbeatMs = Number.NEGATIVE_INFINITY;
  /** Each shared consumer's rows as the last pre-check found them ('*', or its lanes). */
  readonly #laneIds = new Map<string, readonly string[]>();
  /** The lanes as consumers, made once per consumer and lane (a turn's key into every map here). */
  readonly #laneUnits = new Map<string, ResolvedConsumer>();
  /** The rows the last pass turned or judged, each consumer's and each lane's. */
  #unitsSeen: readonly ResolvedConsumer[] = [];
  /** Each laned consumer's lanes this process turns right now (in a slot). */
  readonly #lanesHeld = new Map<string, Set<string>>();
  /** Dispatcher instances sharing the lanes, as the last pre-check counted them. */
  #dispatchers = 1;

  constructor(env: PassEnvironment) {
    this.#env = env;
    this.#precheckKeys = precheckKeys(env.options.consumers);
    this.#featureGated = env.options.consumers.some((c) => c.definition.featureName !== undefined);
    this.#slots = new TurnSlots(env.options.concurrency);
    this.#reads = new SharedReads(SHARED_READS, SHARED_READ_MAX_AGE_MS);
    this.versions = new VersionKeeper(env.options, env.tables, env.logger, env.metrics);
  }

  get slots(): TurnSlots<ConsumerPassResult> {
    return this.#slots;
  }

  /** Settles once turns and read-aheads are done. */
  async idle(): Promise<void> {
    await this.#slots.idle();
    await this.#reads.settled();
    await this.#laneReads.settled();
  }

  /**
   * `await`: one turn per consumer, resolved when all are done (runOnce). `launch`: consumers with
   * more work keep turning until caught up, and the pass returns once they are started, so a slow
   * consumer never holds up the next pass for the others. `wake`: the pass answers an announced
   * commit, and reads the pre-check in full without first asking whether anything changed, or
   * skips it (see IdleKnowledge.canSkipPrecheck).
   */
  async run(mode: 'await' | 'launch', wake?: 'notify' | 'local'): Promise<PassResult> {
    const { options } = this.#env;
    const woken = wake !== undefined;
    this.#reads.prune();
    this.#laneReads.prune();
    const skipPrecheck =
      wake !== undefined && this.#known.canSkipPrecheck(wake, performance.now(), options.pollIntervalMs);
    if (skipPrecheck && wake === 'notify') this.#known.notifySkippedPrecheck();
    const checked = skipPrecheck ? undefined : await this.#precheck(woken);
    const precheck = checked?.precheck;
    let snapshot: Snapshot | undefined; // one per pre-check, parsed when a row needs judging
    // Intervals this process waits out itself (backoff, heartbeat) are measured on the monotonic
    // clock: a step of the wall clock neither stretches nor cuts them. Times stored in the database
    // (retry delays, re-arm cooldowns, time-boxed disables) are judged by the database's clock.
    const nowMs = performance.now();
    if (this.#heartbeatDue(nowMs)) await this.#heartbeat(nowMs);
    // Something changed since the last full pre-check: a takeover may start or end.
    if (checked !== undefined && !checked.standing && this.versions.active)
      await this.versions.step(precheck);
    const allIdle = checked?.standing ? this.#known.allIdleOn(precheck) : undefined;
    if (allIdle && this.#backoff.size === 0 && !this.#featureGated) {
      this.#env.metrics.pass('idle');
      return allIdle;
    }
    this.#known.passJudged(undefined, undefined);
    const byUnit = new Map<string, ConsumerPassResult>();
    const turns: Promise<void>[] = [];
    for (const consumer of this.#unitsOf(precheck)) {
      const row = precheck?.rows.get(consumer.unit);
      const skip = (skipped: ConsumerSkip) => {
        this.#limits.delete(consumer.unit); // caught up or stopped: the next batch starts small
        byUnit.set(consumer.unit, {
          processed: 0,
          failed: 0,
          skipped,
          pendingGaps: row?.gap_count ?? 0,
          behind: row ? BigInt(row.cursor) < BigInt(row.head) : false,
        });
      };
      const feature = consumer.definition.featureName;
      if (feature !== undefined && !options.isFeatureEnabled(feature)) {
        skip('feature-off');
        continue;
      }
      if (this.#backoff.size > 0 && isBackingOff(this.#backoff.get(consumer.unit), nowMs)) {
        skip('backoff');
        continue;
      }
      if (precheck?.quiet.has(consumer.unit)) {
        skip('idle');
        continue;
      }
      if (precheck && !row && !(await this.#reregister(consumer))) {
        skip('missing');
        continue;
      }
      if (
        row &&
        isProvablyIdle(
          row,
          consumer,
          BigInt(row.head),
          (snapshot ??= parseSnapshot(row.snapshot)),
          row.now,
          options,
          this.#env.systemIdentifier(),
        )
      ) {
        if (row.status === 'dead') {
          const decision = rearmDecision(
            { rearmCount: row.rearm_count, lastWriteAt: row.updated_at },
            row.now,
            options,
          );
          if (decision === 'exhausted') this.#reportRearmExhausted(consumer, row.last_error);
        }
        skip(
          row.status === 'dead'
            ? 'dead'
            : row.status === 'disabled'
              ? 'disabled'
              : isWaitingToRetry(retryStateOf(row), row.now, options)
                ? 'retry-later'
                : 'idle',
        );
        continue;
      }
      if (
        row &&
        // Parked keys are not read here: the turn finds them once the row is held.
        keptByAnotherKey(consumer.laneKey, {
          instanceId: row.instance_id,
          laneKey: row.lane_key,
          changing: row.lane_changing,
          parkedKeys: false,
        })
      ) {
        this.#reportOtherKey(consumer, row.lane_key);
        skip('other-key'); // its turn would find the same once the row is held
        continue;
      }
      if (row && this.#beyondShare(consumer, row)) {
        skip('locked'); // another instance's share: it serves this lane
        continue;
      }
      if (this.#slots.has(consumer.unit)) this.#askedAgain.add(consumer.unit);
      // The turn may send its fetch along with its lock, for the cursor the pre-check read (or, with
      // no pre-check, the last one known: the turn checks it against the row it locks).
      const expected = row
        ? row.gap_count === 0
          ? BigInt(row.cursor)
          : undefined
        : this.#known.cursorOf(consumer.unit);
      const turn = this.#slots.run(consumer.unit, () => this.#turns(consumer, mode === 'launch', expected));
      turns.push(
        turn.then((result) => {
          byUnit.set(consumer.unit, result);
        }),
      );
    }
    if (mode === 'await') await Promise.all(turns);
    else for (const turn of turns) turn.catch(() => undefined);
    const byConsumer = byConsumerOf(this.#unitsSeen, byUnit);
    const results = Object.values(byConsumer);
    const processed = results.reduce((sum, r) => sum + r.processed, 0);
    const failed = results.reduce((sum, r) => sum + r.failed, 0);
    this.#env.metrics.pass(
      precheck === undefined && !skipPrecheck ? 'precheck-failed' : turns.length === 0 ? 'idle' : 'ok',
    );
    const result = { processed, failed, byConsumer };
    if (turns.length === 0 && results.every((r) => r.skipped === 'idle')) {
      this.#known.passJudged(precheck, result);
    }
    return result;
  }

  /**
   * The pre-check, or undefined when it failed. `standing`: the cluster's snapshot has not changed
   * since the last full pre-check, which stands (only the clock moved on). A pass woken by a commit
   * does not ask: something did change.
   */
  async #precheck(woken: boolean): Promise<{ precheck: Precheck; standing: boolean } | undefined> {
    const { logger } = this.#env;
    try {
      const checked = await this.#readPrecheck(woken);
      if (this.#precheckFailing) logger.info({}, 'idle pre-check works again');
      this.#precheckFailing = false;
      return checked;
    } catch (error) {
      this.#known.precheckFailed();
      // Nothing is proven idle: every consumer takes a turn. Logged once per outage (docs/design.md §4.1).
      if (!this.#precheckFailing) {
        const hint = poolerHint(error);
        logger.warn(
          { error: messageOf(error), ...(hint === undefined ? {} : { hint }) },
          'idle pre-check failed; running every consumer until it works again',
        );
      }
      this.#precheckFailing = true;
      return undefined;
    }
  }

  /**
   * The cluster's snapshot: from the LISTEN connection when it answers within a poll interval, else
   * from the pool.
   */
  async #snapshotNow(): Promise<string> {
    const { options } = this.#env;
    const asked = this.#env.listenerSnapshot();
    if (asked) {
      const answer = await settleWithin(
        asked.catch(() => undefined),
        options.pollIntervalMs,
      );
      if (answer !== TIMED_OUT && answer !== undefined) return answer;
    }
    return this.#env.own.answered(this.#precheckWaitMs(), 'the idle pre-check', currentSnapshot);
  }

  /**
   * How long the pre-check waits for its answer before its pool is taken for gone silent: its own
   * statement's time and that of one it may queue behind (the pool's two connections also serve
   * turn starts, read-aheads and bookkeeping, each bounded by statementTimeoutMs).
   */
  #precheckWaitMs(): number {
    return 2 * this.#env.options.statementTimeoutMs;
  }

  async #readPrecheck(woken: boolean): Promise<{ precheck: Precheck; standing: boolean }> {
    const { tables, metrics } = this.#env;
    const standing = this.#known.standing;
    if (standing && !woken && (await this.#snapshotNow()) === standing.snapshot) {
      // Nothing changed but the clock: the gauges stand too (gap ages grow as they are read).
      this.#known.precheckStands(performance.now());
      return { precheck: standing, standing: true };
    }
    // Bounded here: a pass waiting for ever on a connection gone silent would deliver nothing more.
    const precheck = await this.#env.own.answered(this.#precheckWaitMs(), 'the idle pre-check', (sql) =>
      precheckConsumers(sql, tables, this.#precheckKeys),
    );
    if (precheck.dispatchers !== null) this.#dispatchers = Math.max(1, precheck.dispatchers);
    const units = this.#unitsOf(precheck);
    for (const consumer of units) {
      const row = precheck.rows.get(consumer.unit);
      if (row) metrics.setConsumer(consumer.name, consumer.instanceId, gaugesOf(row));
      else if (precheck.quiet.has(consumer.unit)) {
        metrics.setConsumer(consumer.name, consumer.instanceId, CAUGHT_UP);
      }
    }
    metrics.keepConsumers(units);
    this.#known.precheckRead(precheck, units, performance.now());
    return { precheck, standing: false };
  }

  async #turns(
    consumer: ResolvedConsumer,
    continueWhileMore: boolean,
    firstCursor: bigint | undefined,
  ): Promise<ConsumerPassResult> {
    // Launched before stop() was called, it waited for a slot: a turn not begun begins no more.
    if (this.#env.isStopping()) {
      return { processed: 0, failed: 0, skipped: 'stopping', pendingGaps: 0, behind: true };
    }
    const held = this.#lanesOf(consumer);
    held?.add(consumer.unit);
    try {
      let total: ConsumerPassResult | undefined;
      let cursor = firstCursor;
      for (;;) {
        const connections = this.#env.turnConnections.acquire();
        let run: TurnsRun;
        try {
          run = await this.#turnsOn(connections, consumer, continueWhileMore, cursor);
        } finally {
          this.#env.turnConnections.release(connections);
        }
        total = total
          ? {
              ...run.result,
              processed: total.processed + run.result.processed,
              failed: total.failed + run.result.failed,
            }
          : run.result;
        if (!run.yielding) return total;
        // Other consumers wait for a slot while this one has more: they take theirs first, and this
        // one goes on after them (without its connection meanwhile). A consumer far behind never
        // keeps the others from their turns.
        await this.#slots.yieldSlot();
        if (this.#env.isStopping()) return total;
        cursor = run.cursor;
      }
    } finally {
      held?.delete(consumer.unit);
    }
  }

  /**
   * The lanes of `consumer`'s consumer and lane count this process holds now; undefined for a row
   * that is no lane of many.
   */
  #lanesOf(consumer: ResolvedConsumer): Set<string> | undefined {
    if (consumer.lane === null || consumer.lane.count === 1) return undefined;
    const key = `${consumer.name}\u0000${consumer.lane.count}`;
    let held = this.#lanesHeld.get(key);
    if (!held) this.#lanesHeld.set(key, (held = new Set()));
    return held;
  }

  /**
   * Lanes are shared out among the dispatchers (docs/design.md §11.1): each takes at most its share,
   * ceil(lanes / dispatchers), so that a busy lane one instance holds turn after turn does not keep
   * the others from ever getting one. A lane beyond this process's share is left to the others while
   * one of them serves it (its row was written within the last second), and taken when none does.
   */
  #beyondShare(consumer: ResolvedConsumer, row: PrecheckRow): boolean {
    const held = this.#lanesOf(consumer);
    // An old lane of a change of lane count is never left: it must reach its barrier and go.
    if (!held || held.has(consumer.unit) || consumer.lane === null || row.lane_changing) return false;
    const share = Math.ceil(consumer.lane.count / this.#dispatchers);
    return held.size >= share && row.now.getTime() - row.updated_at.getTime() < LANE_SERVED_MS;
  }

  /** This process holds more of `consumer`'s lanes than its share: let this one go after its turn. */
  #overShare(consumer: ResolvedConsumer): boolean {
    const held = this.#lanesOf(consumer);
    if (!held || consumer.lane === null) return false;
    return held.size > Math.ceil(consumer.lane.count / this.#dispatchers);
  }

  /**
   * Watches a turn of `consumer` on `connections` for silence (see #turnsOn): cuts its connection
   * once neither its start nor any statement of its transaction has had an answer for its handler
   * calls' time (maxTurnMs, then up to two handlerTimeoutMs: a failed batchHandler's call and the
   * one-by-one call after it) and two statements' (statementTimeoutMs).
   */
  #silenceWatch(consumer: ResolvedConsumer, connections: OwnConnections, progress: TurnProgress) {
    const { options, logger } = this.#env;
    const boundMs = options.maxTurnMs + 2 * consumer.handlerTimeoutMs + 2 * options.statementTimeoutMs;
    const startedAt = performance.now();
    let timer: NodeJS.Timeout | undefined;
    const check = () => {
      const quietMs = performance.now() - Math.max(startedAt, progress.liveness?.answeredAt ?? 0);
      if (quietMs < boundMs) {
        // A timer's longest delay is 2³¹ − 1 ms: a longer one would fire at once.
        timer = setTimeout(check, Math.min(boundMs - quietMs + 1, 2 ** 31 - 1));
        return;
      }
      logger.warn(
        { consumer: consumer.name, instanceId: consumer.instanceId, quietMs: Math.round(quietMs) },
        "a turn's transaction has had no answer for longer than its bounds (maxTurnMs, handlerTimeoutMs, " +
          'statementTimeoutMs): a connection gone silent? Its connection is cut',
      );
      connections.cut();
    };
    timer = setTimeout(check, Math.min(boundMs, 2 ** 31 - 1));
    return {
      stop: () => {
        clearTimeout(timer);
      },
    };
  }

  /** Turns `consumer` while it has more (with `continueWhileMore`) and no other consumer waits for a slot. */
  async #turnsOn(
    connections: OwnConnections,
    consumer: ResolvedConsumer,
    continueWhileMore: boolean,
    firstCursor: bigint | undefined,
  ): Promise<TurnsRun> {
    let processed = 0;
    let failed = 0;
    let outcome: TurnOutcome | undefined;
    let expectedCursor = firstCursor;
    let more = false;
    do {
      // This turn's fetch comes after every request made so far.
      this.#askedAgain.delete(consumer.unit);
      const limit = this.#limits.get(consumer.unit) ?? consumer.batchSize;
      const progress: TurnProgress = { startSent: false, lastWrite: this.#known.lastWriteOf(consumer.unit) };
      try {
        // The batch its next turn would read, fetched ahead while this one delivers. A read-ahead
        // takes a pool connection beyond the turns': only while a turn slot is free.
        const readAhead = this.#slots.running < this.#slots.size ? this.#grown(consumer, limit) : undefined;
        // A turn's statements are bounded on the server (statementTimeoutMs), its handler calls by
        // maxTurnMs and handlerTimeoutMs, but a statement that never gets an answer is not: a
        // connection gone silent (packets dropped without a close, a frozen server or pooler).
        // A turn whose transaction has had no answer for longer than all of those together is on
        // one: its connection is cut, and it fails as at a connection's loss (rolled back,
        // delivered again). A turn that works gets answers: its time in all does not count.
        const watchdog = this.#silenceWatch(consumer, connections, progress);
        try {
          outcome = await runTurn(
            this.#turnEnvironment(connections.sql, readAhead),
            consumer,
            limit,
            expectedCursor,
            progress,
          );
        } finally {
          watchdog.stop();
        }
      } catch (error) {
        this.#limits.delete(consumer.unit);
        this.#known.forget(consumer.unit);
        // Recorded as soon as the turn failed (onLost), or now when it failed before it could say.
        await (progress.lost ?? this.#infraFailure(consumer, error, failedTurnOf(progress)));
        return {
          result: { processed, failed, skipped: 'failed', pendingGaps: 0, behind: true },
          yielding: false,
          cursor: undefined,
        };
      }
      this.#backoff.delete(consumer.unit);
      if (outcome.skipped === 'other-key') this.#reportOtherKey(consumer);
      if (outcome.filledBatch) this.#limits.set(consumer.unit, this.#grown(consumer, limit));
      else if (outcome.skipped === undefined) this.#limits.delete(consumer.unit);
      processed += outcome.handled;
      failed += outcome.failed;
      if (outcome.handled > 0) this.#known.delivered();
      this.#known.turnCommitted(
        consumer.unit,
        outcome.failed > 0 || outcome.dead || outcome.timedOut !== undefined ? 'failed' : progress.wrote,
      );
      expectedCursor = outcome.pendingGaps === 0 ? outcome.cursor : undefined;
      this.#known.turnEnded(
        consumer.unit,
        expectedCursor,
        outcome.failed === 0 && !outcome.dead && outcome.pendingGaps === 0 && isPlainSkip(outcome.skipped),
      );
      if (outcome.timedOut) await this.#recordTimeout(consumer, outcome, failedTurnOf(progress));
      more =
        !outcome.retired &&
        ((continueWhileMore && outcome.hasMore && !this.#overShare(consumer)) ||
          (this.#askedAgain.has(consumer.unit) && outcome.skipped === undefined && !outcome.dead)) &&
        !this.#env.isStopping();
    } while (more && this.#slots.waiting === 0);
    return {
      result: {
        processed,
        failed,
        skipped: outcome.skipped,
        pendingGaps: outcome.pendingGaps,
        // An old lane that retired handed over to new lanes this pass did not turn: not settled.
        behind: outcome.retired
          ? true
          : outcome.cursor !== undefined && outcome.head !== undefined
            ? outcome.cursor < outcome.head
            : outcome.hasMore,
      },
      yielding: more,
      cursor: expectedCursor,
    };
  }

  /**
   * The rows this pass turns: each per-instance consumer's, and each shared consumer's rows as the
   * pre-check found them (its '*' row, or its lanes: the count its rows have, which a change of
   * lanes in progress may make differ from the configured one). Without a pre-check, the rows the
   * last one found. A shared consumer with no row at all is its configured '*' row, re-registered.
   */
  #unitsOf(precheck: Precheck | undefined): readonly ResolvedConsumer[] {
    const units: ResolvedConsumer[] = [];
    for (const consumer of this.#env.options.consumers) {
      // A version retired, abandoned or not live yet (side effects) is not this process's to turn.
      if (consumer.version !== null && !this.versions.runs(consumer)) continue;
      if (consumer.lane === null) {
        units.push(consumer);
        continue;
      }
      const found = precheck?.lanes.get(consumer.name);
      if (precheck) {
        if (found) this.#laneIds.set(consumer.name, found);
        else this.#laneIds.delete(consumer.name);
      }
      const ids = found ?? (precheck ? undefined : this.#laneIds.get(consumer.name));
      if (ids === undefined || (ids.length === 1 && ids[0] === SHARED_INSTANCE_ID)) {
        units.push(consumer);
        continue;
      }
      // A lane whose row was deleted while the others run: re-created by the pass, as a whole
      // consumer's row is. Not during a change of lanes, whose old lanes go once handed over.
      const changing = ids.some(
        (id) => precheck?.rows.get(unitKey(consumer.name, id))?.lane_changing === true,
      );
      for (const instanceId of [...ids, ...(precheck && !changing ? missingLanes(ids) : [])]) {
        // By version too: a version with side effects takes the live version's rows (one name)
        // over, and its lanes must be its own units (its handler, its version), not the old one's.
        const key = `${consumer.name}\u0000${consumer.version ?? ''}\u0000${instanceId}`;
        let unit = this.#laneUnits.get(key);
        if (!unit) {
          unit = laneOf(consumer, instanceId);
          this.#laneUnits.set(key, unit);
        }
        units.push(unit);
      }
    }
    this.#unitsSeen = units;
    return units;
  }

  /** The next batch limit after a turn filled a batch of `limit`. */
  #grown(consumer: ResolvedConsumer, limit: number): number {
    return Math.min(limit * 2, consumer.maxBatchSize);
  }

  #turnEnvironment(turnSql: Sql, readAhead?: number): TurnEnvironment {
    const env = this.#env;
    return {
      options: env.options,
      turnSql,
      tables: env.tables,
      metrics: env.metrics,
      tracer: env.tracer,
      logger: env.logger,
      systemIdentifier: env.systemIdentifier(),
      reads: this.#reads,
      laneReads: this.#laneReads,
      ...(readAhead === undefined ? {} : { readAhead }),
      onRearmExhausted: (consumer, lastError) => {
        this.#reportRearmExhausted(consumer, lastError);
      },
      isStopping: env.isStopping,
      onLost: async (consumer, error, progress) => {
        // A start sent before the loss is taken back once it is recorded (or failed).
        await progress.startRecording?.catch(() => undefined);
        await this.#infraFailure(consumer, error, failedTurnOf(progress));
      },
    };
  }

  /**
   * A consumer of this process has no row: an operator collected it as stale while this process
   * lived on (its heartbeats could not reach the database), or it was deleted. Re-creates it (where
   * the collected row was, see reregisterConsumer) and says so; false when that failed.
   */
  async #reregister(
    consumer: ResolvedConsumer,
    alongside: readonly ResolvedConsumer[] = [],
  ): Promise<boolean> {
    // A laned consumer with no row at all: its lanes, as at start, in one transaction (a lane is
    // created only while the consumer has no row of another lane). The consumer as configured is
    // its '*' unit; a lane keeps the configured count in `lanes` (and recursed here for ever).
    if (consumer.lanes > 1 && consumer.instanceId === SHARED_INSTANCE_ID) {
      const [first, ...rest] = laneInstanceIds(consumer.lanes).map((instanceId) =>
        laneOf(consumer, instanceId),
      );
      return first ? this.#reregister(first, rest) : false;
    }
    const { options, tables, logger, metrics } = this.#env;
    const where = { consumer: consumer.name, instanceId: consumer.instanceId };
    for (const unit of [consumer, ...alongside]) this.#known.forget(unit.unit);
    if (consumer.version !== null) {
      // An operator may have abandoned or dropped the version since: its rows stay gone.
      await this.versions.refresh().catch(() => undefined);
      if (!this.versions.runs(consumer)) return false;
    }
    let done;
    try {
      // A version's row keeps its version; a rebuild's starts where the rebuild started.
      const version = this.versions.rowOf(consumer);
      const rowOf = (unit: ResolvedConsumer) => ({
        name: unit.name,
        instanceId: unit.instanceId,
        startFrom: unit.startFrom,
        perInstance: unit.lane === null,
        version: unit.version,
        ...(version && version.state !== 'live' && !version.sideEffects
          ? { startAt: version.startPosition }
          : {}),
      });
      done = await reregisterConsumer(
        options.sql,
        tables,
        options.schema,
        rowOf(consumer),
        alongside.map(rowOf),
      );
    } catch (error) {
      logger.error(
        { ...where, error: messageOf(error) },
        "the consumer's row is missing and could not be re-registered; it is not served until it is",
      );
      return false;
    }
    if (done === undefined) return true; // another process re-created it first
    metrics.reregistered(consumer.name, consumer.instanceId, done.from);
    if (done.from === 'collected') {
      logger.warn(
        { ...where, cursor: done.cursor, collectedAt: done.collectedAt, collectedBy: done.collectedBy },
        "this process's row for the consumer was collected as stale while the process was running " +
          '(its heartbeat could not reach the database); re-registered where it was',
      );
    } else {
      logger.warn(
        { ...where, cursor: done.cursor, startFrom: consumer.startFrom },
        "the consumer's row was missing (deleted); re-registered as at start",
      );
    }
    if (done.prunedThrough !== null) {
      logger.error(
        { ...where, prunedThrough: done.prunedThrough },
        'retention pruned events this consumer had not received while its row was gone: ' +
          `ids up to ${done.prunedThrough} it had not reached are not delivered to it`,
      );
    }
    return true;
  }

  /**
   * Another deployment recorded another lane key with the consumer's rows (a lane of several, a
   * change of lane count, or parked keys): this process leaves them to the processes that declare
   * it. Once per consumer.
   */
  #reportOtherKey(consumer: ResolvedConsumer, recorded?: string | null): void {
    if (this.#otherKeyReported.has(consumer.name)) return;
    this.#otherKeyReported.add(consumer.name);
    this.#env.logger.warn(
      {
        consumer: consumer.name,
        laneKey: laneKeyOption(laneKeyText(consumer.laneKey)),
        ...(typeof recorded === 'string' ? { recordedLaneKey: laneKeyOption(recorded) } : {}),
      },
      "the consumer's lanes (or parked keys) are kept by another lane key, which another deployment " +
        'recorded: this process leaves them to the processes that declare that key (restart it with the ' +
        'recorded key; on one lane the key matters only while keys are parked, which those processes ' +
        'replay or drop)',
    );
  }

  /** Once per consumer and process, however many passes see it (docs/design.md §6.1). */
  #reportRearmExhausted(consumer: ResolvedConsumer, lastError: string | null): void {
    const env = this.#env;
    if (this.#rearmExhaustedReported.has(consumer.unit)) return;
    this.#rearmExhaustedReported.add(consumer.unit);
    env.metrics.rearmExhausted(consumer.name, consumer.instanceId);
    env.logger.error(
      {
        consumer: consumer.name,
        instanceId: consumer.instanceId,
        maxRearmCount: env.options.maxRearmCount,
        lastError,
      },
      'dead consumer has used up its automatic re-arms: an operator must skip the poison event or restart it',
    );
  }

  /** `turn`: what the failed turn held; a start record it sent is taken back (it was no crash). */
  async #infraFailure(consumer: ResolvedConsumer, error: unknown, turn: FailedTurn): Promise<void> {
    const { options, tables, logger } = this.#env;
    const category = classifyFailure(error);
    const backoff = nextBackoff(
      this.#backoff.get(consumer.unit),
      performance.now(),
      options.backoffInitialMs,
      options.backoffMaxMs,
    );
    this.#backoff.set(consumer.unit, backoff);
    // "prepared statement … does not exist" behind a transaction pooler: say what to change.
    const hint = poolerHint(error);
    logger.error(
      {
        consumer: consumer.name,
        instanceId: consumer.instanceId,
        category,
        error: messageOf(error),
        retryInMs: Math.round(backoff.untilMs - performance.now()),
        ...(hint === undefined ? {} : { hint }),
      },
      'turn failed (infrastructure); backing off this consumer, its attempts are not counted',
    );
    try {
      await recordInfraFailure(options.sql, tables, consumer.name, consumer.instanceId, {
        message: messageOf(error),
        category,
        undoTurnStart: options.countCrashedAttempts,
        turn,
      });
    } catch {
      // Best effort: the database may well be what failed.
    }
  }

  async #recordTimeout(consumer: ResolvedConsumer, outcome: TurnOutcome, turn: FailedTurn): Promise<void> {
    const failure = outcome.timedOut;
    if (!failure) return;
    // A batchHandler's timeout is no attempt: the next turn hands the first event to `handler`.
    const attempts = failure.counted
      ? attemptsCharged(consumer, failure.attempts, failure.error, failure.event)
      : failure.attempts;
    // Never ended here, whatever the policy: this turn was rolled back with the events before the
    // failing one. Later turns deliver those, then apply the policy to this event without another
    // call (DeliveryPlan.spent): the attempt that uses the last one up is recorded as a
    // 'handler-timeout'. (Attempts used up later by a lower maxAttempts get one more call.)
    this.#env.logger.warn(
      { consumer: consumer.name, eventId: failure.event.id, attempts },
      'transactional handler timed out; its turn was rolled back',
    );
    try {
      const recorded = await recordFailedAttempt(
        this.#env.options.sql,
        this.#env.tables,
        consumer.name,
        consumer.instanceId,
        {
          eventId: failure.event.id,
          attempts,
          message: messageOf(failure.error),
          timedOut: failure.counted && attempts >= consumer.maxAttempts,
          turn,
        },
      );
      if (!recorded) {
        this.#env.logger.info(
          { consumer: consumer.name, eventId: failure.event.id },
          'the timed-out attempt is not recorded: the consumer row was written since (another instance ' +
            'took it over): the attempt is not counted',
        );
      }
    } catch (error) {
      // recordFailedAttempt would have taken back the timed-out turn's start, if it sent one.
      await this.#infraFailure(consumer, error, turn);
    }
  }

  /** Checked before awaiting {@link #heartbeat}: most passes have none to send, and skip an await. */
  #heartbeatDue(nowMs: number): boolean {
    const { options } = this.#env;
    return options.instanceId !== undefined && nowMs - this.#lastHeartbeatMs >= options.heartbeatIntervalMs;
  }

  async #heartbeat(nowMs: number): Promise<void> {
    const { options, tables, logger } = this.#env;
    if (options.instanceId === undefined) return;
    const names = options.consumers.filter((c) => c.instanceId === options.instanceId).map((c) => c.name);
    if (names.length === 0) return;
    this.#lastHeartbeatMs = nowMs;
    try {
      await heartbeat(options.sql, tables, names, options.instanceId);
    } catch (error) {
      logger.warn({ error: messageOf(error) }, 'could not record the per-instance heartbeat');
    }
  }
}

/** What #turnsOn did: its result, and whether it stopped for consumers waiting while it had more (from `cursor`). */
interface TurnsRun {
  readonly result: ConsumerPassResult;
  readonly yielding: boolean;
  readonly cursor: bigint | undefined;
}

function failedTurnOf(progress: TurnProgress): FailedTurn {
  return { heldXmin: progress.heldXmin ?? null, startSent: progress.startSent };
}

/**
 * Each consumer's result from its rows' (a laned consumer's lanes summed: it delivered when any
 * lane did, and its skip is the first lane's that is not plain idleness).
 */
function byConsumerOf(
  units: readonly ResolvedConsumer[],
  byUnit: ReadonlyMap<string, ConsumerPassResult>,
): Record<string, ConsumerPassResult> {
  const byConsumer: Record<string, ConsumerPassResult> = {};
  const lanes = new Map<string, Record<string, ConsumerPassResult>>();
  for (const unit of units) {
    const result = byUnit.get(unit.unit);
    if (!result) continue;
    const before = byConsumer[unit.name];
    if (unit.lane !== null && unit.lane.count > 1) {
      let perLane = lanes.get(unit.name);
      if (!perLane) lanes.set(unit.name, (perLane = {}));
      perLane[unit.instanceId] = result;
    }
    byConsumer[unit.name] = before
      ? {
          processed: before.processed + result.processed,
          failed: before.failed + result.failed,
          skipped:
            before.skipped === undefined || result.skipped === undefined
              ? undefined
              : before.skipped === 'idle'
                ? result.skipped
                : before.skipped,
          pendingGaps: before.pendingGaps + result.pendingGaps,
          behind: before.behind || result.behind,
        }
      : result;
  }
  for (const [name, perLane] of lanes) {
    const summed = byConsumer[name];
    if (summed) byConsumer[name] = { ...summed, lanes: perLane };
  }
  return byConsumer;
}

/** A turn that ran (delivering or not), or found its consumer held by another instance, saw nothing unusual. */
function isPlainSkip(skipped: SkipReason | undefined): boolean {
  return skipped === undefined || skipped === 'locked';
}

/**
 * Shared batches kept at once, and for how long: consumers catching up together stay within a few
 * batches of each other, and a dispatcher that caught up lets them go within seconds.
 */
const SHARED_READS = 4;
const SHARED_READ_MAX_AGE_MS = 2_000;

/**
 * Group reads kept per laned consumer: its lanes spread over a few batches while catching up (four
 * of at most 16,384 events: docs/design.md §11.2).
 */
const LANE_READS = 4;

/** A lane whose row was written this recently is being served (by this or another instance). */
const LANE_SERVED_MS = 1_000;

/** The gauges of a consumer the pre-check found trivially caught up. */
const CAUGHT_UP = Object.freeze({
  lagEvents: 0,
  lagSeconds: 0,
  stagnationSeconds: 0,
  gapRanges: 0,
  oldestGapSinceMs: null,
  dead: false,
});

/** A consumer's gauges from its pre-check row, read just now. */
function gaugesOf(row: PrecheckRow): ConsumerGauges {
  const now = row.now.getTime();
  const head = BigInt(row.head);
  const cursor = BigInt(row.cursor);
  const behind = cursor < head;
  return {
    lagEvents: behind ? Number(head - cursor) : 0,
    lagSeconds: row.lag_seconds ?? 0,
    stagnationSeconds:
      behind && row.last_progress_at ? Math.max(0, (now - row.last_progress_at.getTime()) / 1000) : 0,
    gapRanges: row.gap_count,
    oldestGapSinceMs: row.oldest_gap_at
      ? performance.now() - Math.max(0, now - row.oldest_gap_at.getTime())
      : null,
    dead: row.status === 'dead',
  };
}

/** Why a pass runs: undefined for a poll tick, else the kind of commit that was announced. */
export type PassWake = 'notify' | 'local' | undefined;

/**
 * When passes run (docs/design.md §4.1): wake-ups from the poll timer, NOTIFY and this process's
 * commits coalesce, so at most one pass runs and one more is queued; the queued one remembers the
 * strongest reason it was asked for.
 */
export class PassScheduler {
  readonly #run: (wake: PassWake) => Promise<unknown>;
  readonly #accepting: () => boolean;
  readonly #logger: Logger;
  readonly #inFlight = new Set<Promise<unknown>>();
  #running = false;
  #requested = false;
  /** A pending request came from an announced commit (NOTIFY or this process). */
  #woken = false;
  /** A pending request came from a commit in this process. */
  #local = false;

  /**
   * @param run one pass
   * @param accepting whether requests are served now (started and not stopping)
   */
  constructor(run: (wake: PassWake) => Promise<unknown>, accepting: () => boolean, logger: Logger) {
    this.#run = run;
    this.#accepting = accepting;
    this.#logger = logger;
  }

  /**
   * Asks for a pass. `woken`: a commit was announced (NOTIFY or a local append), so the pass need
   * not first ask whether anything changed since the last pre-check. `local`: by transaction() in
   * this process, on this pool (a NOTIFY may come from anyone who can connect, and may be late).
   */
  request(woken: boolean, local = false): void {
    if (!this.#accepting()) return;
    this.#woken ||= woken;
    this.#local ||= local;
    if (this.#running) {
      this.#requested = true;
      return;
    }
    this.#running = true;
    // A request's commit pokes this synchronously, inside the request's async context: started
    // there, the pass (its turn spans, and whatever handlers read from the active context) would
    // belong to that request. Passes serve every appender; the appenders' traces are links on the
    // handler spans (traceparent in the event metadata).
    void this.track(context.with(ROOT_CONTEXT, () => this.#runPasses()));
  }

  /** Counts `promise` as a pass in flight until it settles (see {@link drain}). */
  track<T>(promise: Promise<T>): Promise<T> {
    this.#inFlight.add(promise);
    const settled = () => {
      this.#inFlight.delete(promise);
    };
    void promise.then(settled, settled);
    return promise;
  }

  /** Settles once no pass is in flight. */
  async drain(): Promise<void> {
    while (this.#inFlight.size > 0) await Promise.allSettled([...this.#inFlight]);
  }

  /** Another pass was asked for while this one ran (a method: the request comes in meanwhile). */
  #askedAgain(): boolean {
    return this.#requested && this.#accepting();
  }

  /** Runs passes for as long as requests come in while one runs, one at a time. */
  async #runPasses(): Promise<void> {
    try {
      do {
        this.#requested = false;
        const wake: PassWake = this.#woken ? (this.#local ? 'local' : 'notify') : undefined;
        this.#woken = false;
        this.#local = false;
        await this.#run(wake);
      } while (this.#askedAgain());
    } catch (error) {
      this.#logger.error({ error: messageOf(error) }, 'dispatcher pass failed');
    } finally {
      this.#running = false;
    }
  }
}

/** The lanes missing from `ids`, when they are all lanes of one count: the rest of that count. */
function missingLanes(ids: readonly string[]): string[] {
  const counts = new Set(ids.map((id) => parseLaneInstanceId(id)?.count ?? 0));
  const [count] = counts;
  if (counts.size !== 1 || count === undefined || count < 2 || ids.length >= count) return [];
  return laneInstanceIds(count).filter((id) => !ids.includes(id));
}

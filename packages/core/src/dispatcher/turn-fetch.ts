// The fetch of a turn (dispatcher/turn.ts): the lock with the early fetch behind it, the batch the
// turn delivers from (its own fetch, the early one, or another turn's read), and the gap logic's
// view of it. One statement, one snapshot: docs/design.md §5.
import type { Opening } from '../consumer-state/turn-machine.js';
import type { StartInFlight } from '../consumer-state/consumer-state.js';
import type { EventRecord } from '../events.js';
import type { GapRange, TurnInput } from '../gaps/gaps.js';
import { parseSnapshot } from '../gaps/snapshot.js';
import type { ResolvedConsumer } from '../options.js';
import { lockConsumer, type LockedRow } from '../queries/consumers.js';
import { fetchBatch, type FetchedBatch } from '../queries/events.js';
import type { Tables } from '../schema/tables.js';
import type { Sql, TransactionSql } from '../sql-types.js';
import type { EventBatch, SharedReads } from './shared-reads.js';
import type { TurnEnvironment } from './turn.js';

/**
 * Sends the lock and the read of everything the turn decides on (see lockConsumer), then the fetch
 * for the cursor this turn expects (the pre-check's, or its previous turn's): one round trip. The
 * early fetch is used only if the locked row has that cursor and nothing that changes what the
 * turn fetches; it is not sent when another turn's read of that cursor is there to take, and is
 * offered to the other consumers' turns at once.
 */
export function lockWithEarlyFetch(
  env: TurnEnvironment,
  consumer: ResolvedConsumer,
  tx: TransactionSql,
  limit: number,
  expectedCursor: bigint | undefined,
): { row: Promise<LockedRow | undefined>; early: Promise<EventBatch> | undefined } {
  const { options, tables: t } = env;
  const lock = lockConsumer(tx, t, consumer.name, consumer.instanceId, {
    statementTimeoutMs: options.statementTimeoutMs,
    idleInTransactionTimeoutMs: consumer.handlerTimeoutMs + options.statementTimeoutMs,
  });
  lock.row.catch(() => undefined);
  const early =
    expectedCursor === undefined || env.reads?.has(expectedCursor)
      ? undefined
      : readFrom(tx, t, expectedCursor, [], limit, env.reads);
  early?.catch(() => undefined); // fails with the lock, whose failure the turn reports
  return { row: lock.row, early };
}

/** A fetched batch, and whether it is another turn's full read (then nothing beyond it was examined). */
export interface TurnBatch extends EventBatch {
  readonly shared: boolean;
}

/**
 * The turn's fetch (one statement, one snapshot: docs/design.md §5): the early fetch sent behind
 * the lock when it read this cursor, or a batch another turn read from it (plain turns only), or a
 * fetch of its own with the ranges to re-fetch and the stragglers due. A batch that came back full
 * starts the read of the next one (catching up: read while this one is delivered and committed).
 */
export async function fetchTurnBatch(
  env: TurnEnvironment,
  consumer: ResolvedConsumer,
  tx: TransactionSql,
  turn: {
    readonly cursor: bigint;
    readonly limit: number;
    readonly rechecked: readonly GapRange[];
    readonly stragglers: StartInFlight | undefined;
    readonly plain: boolean;
    readonly early: Promise<EventBatch> | undefined;
  },
): Promise<TurnBatch> {
  const { options, tables: t } = env;
  const { cursor, limit } = turn;
  const reads = turn.plain ? env.reads : undefined;
  const early = turn.plain ? turn.early : undefined;
  const shared = reads && !early ? await reads.take(cursor, limit, options.statementTimeoutMs) : undefined;
  const batch =
    shared ??
    (await (early ??
      readFrom(
        tx,
        t,
        cursor,
        consumer.ordering === 'fast' ? turn.rechecked : [],
        limit,
        reads,
        turn.stragglers,
      )));
  const last = batch.events[batch.events.length - 1];
  const aheadLimit = env.readAhead;
  if (reads && aheadLimit !== undefined && last && batch.events.length === limit) {
    reads.readAhead(last.id, aheadLimit, () => readBatch(options.sql, t, last.id, aheadLimit));
  }
  return { ...batch, shared: shared !== undefined };
}

/**
 * The turn's fetch statement, started at once. With `reads`, it is offered to the other
 * consumers' turns from the same cursor while it runs, and kept for them if LIMIT cut it.
 */
export function readFrom(
  tx: TransactionSql,
  t: Tables,
  cursor: bigint,
  ranges: readonly GapRange[],
  limit: number,
  reads: SharedReads | undefined,
  stragglers?: StartInFlight,
): Promise<EventBatch> {
  const bounds = { from: ranges.map((r) => r.from), to: ranges.map((r) => r.to) };
  const reading = fetchBatch(tx, t, cursor, bounds, limit, stragglers).then(batchOf);
  reads?.offer(cursor, limit, reading);
  return reading;
}

/** The events above `cursor` read by one autocommit statement of the pool. */
async function readBatch(sql: Sql, t: Tables, cursor: bigint, limit: number): Promise<EventBatch> {
  return batchOf(await fetchBatch(sql, t, cursor, { from: [], to: [] }, limit));
}

function batchOf(fetched: FetchedBatch): EventBatch {
  return { events: fetched.events, xmin: parseSnapshot(fetched.snapshot).xmin, head: BigInt(fetched.head) };
}

const MAX_XID = 2n ** 63n - 1n;

/** The gap logic's view of what the turn fetched, and the fetched events by id. */
export function turnInputOf(
  batch: TurnBatch,
  opening: Extract<Opening, { kind: 'open' }>,
  rechecked: readonly GapRange[],
  consumer: ResolvedConsumer,
  limit: number,
): { input: TurnInput; events: Map<bigint, EventRecord> } {
  const events = new Map<bigint, EventRecord>(batch.events.map((e) => [e.id, e]));
  const input: TurnInput = {
    cursor: opening.state.cursor,
    rechecked,
    fetch: {
      ids: [...events.keys()],
      complete: !batch.shared && events.size < limit, // a shared batch is a full one
      // After a restore onto another cluster, no transaction of the old one can still commit.
      xmin: opening.clusterChanged ? MAX_XID : batch.xmin,
    },
    ordering: consumer.ordering,
    ...(opening.stragglers ? { stragglersUpTo: opening.stragglers.upto } : {}),
  };
  return { input, events };
}

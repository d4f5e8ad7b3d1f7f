import type { EventRecord } from '../events.js';
import type { Ordering } from '../gaps/gaps.js';
import type { TransactionSql } from '../sql-types.js';

/** What a handler is told about the delivery. */
export interface HandlerContext {
  /** The consumer's name (for a version of it, the name it was declared with, without '@v<N>'). */
  readonly consumer: string;
  /**
   * The version this call runs for (Consumer.version): a projection rebuilt beside its live
   * version writes to the new version's tables. Undefined for a consumer declared without one.
   */
  readonly version: number | undefined;
  /** '*' for shared consumers, the process's instance id for per-instance ones. */
  readonly instanceId: string;
  /** 1 for the first delivery of this event to this consumer, 2 for the first retry, … */
  readonly attempt: number;
  /**
   * Transactional consumers: the turn's transaction (inside a savepoint). Writes through it commit
   * atomically with the consumer's cursor. Undefined for other consumers.
   */
  readonly tx: TransactionSql | undefined;
  /** Aborted when the handler's time is up (handlerTimeoutMs); stop() waits for handlers instead. */
  readonly signal: AbortSignal;
}

export interface ErrorPolicy {
  /** Failures on one event before the consumer is marked dead. @defaultValue the dispatcher's maxAttempts (10) */
  readonly maxAttempts?: number;
  /** At maxAttempts, record the event in dead_letters and go on instead of stopping. @defaultValue false */
  readonly skipApplyErrors?: boolean;
  /**
   * Says that a handler's error is permanent: retrying the event cannot help (a mail provider's
   * hard bounce, a 4xx answer of an API). Such a failure uses up every attempt at once: the event
   * goes to the dead letters (with skipApplyErrors) or the consumer is dead, without waiting out
   * the retries. Must not throw; one that throws counts as "not permanent". @defaultValue none:
   * every failure is retried up to maxAttempts
   */
  readonly isPermanent?: (error: unknown, event: EventRecord) => boolean;
  /**
   * When an event uses up its attempts, park its key (see Consumer.laneKey, by default the stream
   * id) instead of stopping the consumer: that event and every later event of the key are set
   * aside, in order, and the consumer goes on with the other keys. An operator lists the parked
   * keys, replays one in order or drops it (docs/operating.md#parked-keys). Not with
   * skipApplyErrors. @defaultValue false
   */
  readonly parkKey?: boolean;
}

export interface Consumer {
  /** Unique per dispatcher; at most 200 bytes. */
  readonly name: string;
  /**
   * Handles one event. Must be idempotent: delivery is at least once. Must not modify the event:
   * consumers of one dispatcher at the same cursor may receive the same object (one read per batch).
   */
  readonly handler: (event: EventRecord, context: HandlerContext) => unknown;
  /**
   * Optional fast path: handles a whole batch. When it throws, the same events are delivered
   * again one by one through `handler`, which pins the failing event.
   */
  readonly batchHandler?: (events: readonly EventRecord[], context: HandlerContext) => unknown;
  readonly errorPolicy?: ErrorPolicy;
  /** 'shared': one cursor for all instances. 'per-instance': a cursor per process. @defaultValue 'shared' */
  readonly delivery?: 'shared' | 'per-instance';
  /** Where a newly registered consumer starts; never changes an existing cursor. @defaultValue 'beginning' */
  readonly startFrom?: 'beginning' | 'now';
  /**
   * 'fast': deliver events as they become visible; an event committed late below the cursor is
   * delivered when it appears. 'strict': exact id order; the cursor waits at the first unresolved
   * gap. @defaultValue 'fast'
   */
  readonly ordering?: Ordering;
  /** The handler receives the turn's transaction as `context.tx`. @defaultValue false */
  readonly transactional?: boolean;
  /** The consumer runs only while `isFeatureEnabled(featureName)` says so; its cursor waits meanwhile. */
  readonly featureName?: string;
  /** Overrides the dispatcher's handlerTimeoutMs for this consumer. */
  readonly handlerTimeoutMs?: number;
  /** Overrides the dispatcher's batchSize for this consumer. */
  readonly batchSize?: number;
  /** Overrides the dispatcher's maxBatchSize for this consumer. */
  readonly maxBatchSize?: number;
  /**
   * Runs the consumer as this many lanes (docs/design.md §11): every event belongs to exactly one
   * lane, by a stable hash of its key (laneKey); each lane has its own cursor, gaps, status and
   * row lock, so lanes run at once, on this process's turn slots and on every instance's. Order
   * is kept per key, not across keys. Shared consumers only. Changing it for a consumer already
   * registered with another count re-lanes it at start (nothing lost, order per key kept).
   * @defaultValue 1
   */
  readonly lanes?: number;
  /**
   * What an event is keyed by, for lanes and parked keys: its stream id, or a top-level field of
   * its data or metadata (a missing field is the key ''). @defaultValue 'streamId'
   */
  readonly laneKey?: 'streamId' | { readonly data: string } | { readonly metadata: string };
  /**
   * Only these event types reach the handler; the fetch returns only them (the cursor still moves
   * past the others). @defaultValue every type
   */
  readonly types?: readonly string[];
  /**
   * This consumer's version (docs/design.md §12). Declaring version N + 1 while N is live rebuilds
   * N + 1 beside N, from the beginning of the log (or `rebuild.from`), in consumer rows of its
   * own ('<name>@v<N+1>'); N keeps serving until N + 1 takes over. A process declares every version
   * it runs (several consumers with this name, each with its own version); a version that was
   * taken over, or a rebuild an operator abandoned, is not run again. @defaultValue none: the
   * consumer is not versioned
   */
  readonly version?: number;
  /**
   * The handler has effects outside the database (mail, webhooks): a new version of it is never
   * rebuilt (it would send everything again). It takes over the consumer's rows at the position
   * the live version reached, when an operator approves it (or at once with
   * `rebuild.takeover: { withinEvents }`). @defaultValue false
   */
  readonly sideEffects?: boolean;
  /** How a new version of this consumer is rebuilt and takes over (docs/design.md §12). */
  readonly rebuild?: RebuildOptions;
  /**
   * A view that reads the live version's data: the takeover points it at this version's relation
   * (`source`, a table or view of this version) in the transaction that makes it live, so a
   * reader sees one version or the other, never half of one. Names are `name` or `schema.name`.
   */
  readonly liveView?: { readonly view: string; readonly source: string };
}

export interface RebuildOptions {
  /**
   * Where a new version starts: the beginning of the log, or after this event id (it then never
   * receives the events up to it). @defaultValue 'beginning'
   */
  readonly from?: 'beginning' | number | bigint;
  /**
   * 'manual': it takes over when an operator approves it (once caught up). `{ withinEvents }`: it
   * takes over by itself once its rows are within this many events of the log head.
   * @defaultValue 'manual'
   */
  readonly takeover?: 'manual' | { readonly withinEvents: number };
}

/** Identity for defining consumers with checked types. */
export function defineConsumer(consumer: Consumer): Consumer {
  return consumer;
}

/** A JSON object as stored in a jsonb column. */
export type JsonObject = { [key: string]: unknown };

/**
 * An event to append. `data` and `metadata` must be JSON objects (they are stored as jsonb objects).
 * `TData` may be an interface of the application's (interfaces have no index signature, so the
 * bound is `object`); append() refuses, at run time, data that is not a plain JSON object.
 */
export interface NewEvent<TData extends object = JsonObject> {
  readonly streamId: string;
  readonly type: string;
  readonly data: TData;
  /** Correlation / causation ids; Sluice adds the W3C `traceparent` of the active span. */
  readonly metadata?: JsonObject;
}

/** A stored event, as append() returns it and handlers receive it. */
export interface EventRecord<TData extends object = JsonObject> {
  /** Global position in the log. A bigint: ids outgrow 2^53 and must never be compared as strings. */
  readonly id: bigint;
  readonly streamId: string;
  readonly type: string;
  readonly data: TData;
  readonly metadata: JsonObject;
  readonly createdAt: Date;
}

/** Event types starting with this prefix are Sluice's own; append() refuses them. */
export const RESERVED_TYPE_PREFIX = '$sluice';

/**
 * The type of a tombstone an operator inserts to give up on a gap id (docs/design.md §5.7): a late
 * writer of that id fails on the primary key instead of its event being skipped silently.
 * Dispatchers resolve tombstones without calling handlers.
 */
export const TOMBSTONE_TYPE = '$sluice.tombstone';

/**
 * The type of an event a filtered fetch does not keep for its consumer (another lane's, or of a
 * type it does not handle, docs/design.md §11): a stub with only its id, never handed to a handler,
 * resolved as passed.
 */
export const PASSED_TYPE = '$sluice.passed';

const NOTHING: JsonObject = Object.freeze({});
const EPOCH = new Date(0);

/** The stub of an event passed without being read whole (see PASSED_TYPE). */
export function passedStub(id: bigint): EventRecord {
  return { id, streamId: '', type: PASSED_TYPE, data: NOTHING, metadata: NOTHING, createdAt: EPOCH };
}

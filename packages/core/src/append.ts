import { guardedBegin } from './connections/guarded-transaction.js';
import {
  EventsNotStoredError,
  InvalidEventError,
  InvalidOptionError,
  messageOf,
  notMigratedOr,
} from './errors.js';
import { compare } from './gaps/gaps.js';
import { RESERVED_TYPE_PREFIX, type EventRecord, type JsonObject, type NewEvent } from './events.js';
import { resolveSchemaName, eventsTable } from './schema/tables.js';
import { optionsObject, requirePool } from './options.js';
import { pgArray } from './queries/pg-array.js';
import { activeTraceparent } from './telemetry/tracing.js';
import { type Sql, type TransactionSql, valuesOf } from './sql-types.js';
import { wakeUpChannel } from './wake-up/channel.js';
import { wakeUpNotifierFor } from './wake-up/wake-up-notifier.js';

/** How dispatchers learn that the appended events exist. */
export type WakeUpMode = 'auto' | 'in-transaction' | 'none';

export interface AppendOptions {
  /** @defaultValue 'sluice' */
  schema?: string;
  /**
   * `'auto'`: inside {@link transaction}, dispatchers are woken right after the commit (local ones
   * directly, other processes by one coalesced NOTIFY); elsewhere they find the events at their
   * next poll. `'in-transaction'`: NOTIFY inside the caller's transaction, for writers that cannot
   * use {@link transaction} — it wakes at commit but serialises the commits of all notifying
   * transactions (docs/design.md §3.3). `'none'`: polling only.
   * @defaultValue 'auto'
   */
  wakeUp?: WakeUpMode;
  /** Largest accepted `data` + `metadata`, in bytes of JSON text. @defaultValue 1_048_576 (1 MiB) */
  maxEventBytes?: number;
}

const MAX_NAME_BYTES = 1000;
const DEFAULT_MAX_EVENT_BYTES = 1_048_576;
/** PostgreSQL refuses a longer jsonb string (2^28 - 1 bytes): a larger limit would let one through. */
const MAX_JSONB_BYTES = 268_435_455;
/** The smallest event: `{}` as its data and `{}` as its metadata. */
const MIN_EVENT_BYTES = 4;

/** Schemas appended to inside each transaction() call, keyed by its transaction and its savepoints. */
const wakeUpsAfterCommit = new WeakMap<TransactionSql, Set<string>>();

/**
 * Inserts `events` inside the caller's transaction and returns them with their ids, in id order
 * (which is the order given).
 * Nothing is visible to consumers until the caller commits; a rollback leaves no trace.
 * @throws {InvalidEventError} when an event is malformed (nothing is written)
 * @throws {EventsNotStoredError} when a trigger or rule of the database's stored fewer rows than sent
 * @throws {SchemaNotMigratedError} when the schema has no events table (the statement failed: the
 *   caller's transaction is aborted)
 */
export async function append(
  tx: TransactionSql,
  events: readonly NewEvent<object>[],
  options?: AppendOptions,
): Promise<EventRecord[]> {
  const given = optionsObject(options, { fields: ['schema', 'wakeUp', 'maxEventBytes'], of: 'append()' });
  const wakeUp = given.wakeUp ?? 'auto';
  const maxEventBytes = given.maxEventBytes ?? DEFAULT_MAX_EVENT_BYTES;
  if (typeof tx !== 'function') {
    throw new InvalidOptionError(
      'tx',
      'must be a postgres.js transaction: append(tx, events) inside sql.begin()',
    );
  }
  const schema = resolveSchemaName(given.schema);
  if (!['auto', 'in-transaction', 'none'].includes(wakeUp)) {
    throw new InvalidOptionError('wakeUp', "must be 'auto', 'in-transaction' or 'none'");
  }
  if (
    !Number.isSafeInteger(maxEventBytes) ||
    maxEventBytes < MIN_EVENT_BYTES ||
    maxEventBytes > MAX_JSONB_BYTES
  ) {
    throw new InvalidOptionError(
      'maxEventBytes',
      `must be an integer from ${MIN_EVENT_BYTES} to ${MAX_JSONB_BYTES}`,
    );
  }
  if (!Array.isArray(events)) throw new InvalidOptionError('events', 'must be an array of events');
  if (events.length === 0) return [];

  // One lookup per call: every event of the call is appended under the same active span.
  const traceparent = activeTraceparent();
  const streamIds: string[] = [];
  const types: string[] = [];
  const data: string[] = [];
  const metadata: string[] = [];
  // Validated as unknown input: JavaScript callers and request bodies do not respect the types.
  // By index: a hole in a sparse array is an undefined event (refused), not one skipped.
  for (let index = 0; index < events.length; index++) {
    const event: unknown = events[index];
    if (!isRecord(event)) throw new InvalidEventError(index, 'event', 'must be an object');
    streamIds.push(checkName(index, 'streamId', readField(index, event, 'streamId')));
    const type = checkName(index, 'type', readField(index, event, 'type'));
    if (type.startsWith(RESERVED_TYPE_PREFIX)) {
      throw new InvalidEventError(
        index,
        'type',
        `must not start with "${RESERVED_TYPE_PREFIX}" (reserved for Sluice)`,
      );
    }
    types.push(type);
    const dataJson = toJsonObject(index, 'data', readField(index, event, 'data'));
    const metadataInput = readField(index, event, 'metadata');
    const metadataJson = toJsonObject(
      index,
      'metadata',
      withTraceparent(metadataInput === undefined ? {} : metadataInput, traceparent),
    );
    if (exceedsUtf8Bytes(maxEventBytes, dataJson, metadataJson)) {
      throw new InvalidEventError(
        index,
        'data',
        `is larger than maxEventBytes (${maxEventBytes} bytes of JSON)`,
      );
    }
    data.push(dataJson);
    metadata.push(metadataJson);
  }

  let rows: Awaited<ReturnType<typeof insertEvents>>;
  try {
    rows = await insertEvents(tx, eventsTable(tx, schema), streamIds, types, data, metadata);
  } catch (error) {
    throw notMigratedOr(error, schema);
  }
  // A trigger or rule of the database's that drops rows would pair the others with the wrong events.
  if (rows.length !== streamIds.length) throw new EventsNotStoredError(schema, streamIds.length, rows.length);
  // Ids were drawn in the caller's order, one row after the other: the i-th smallest is event i's.
  let ids = rows.map(([id]) => BigInt(id));
  if (!isAscending(ids)) {
    rows.sort((a, b) => compare(BigInt(a[0]), BigInt(b[0])));
    ids = rows.map(([id]) => BigInt(id));
  }
  const stored = rows.map(([, createdAt], i) =>
    storedEvent(
      ids[i] as bigint,
      new Date(createdAt),
      streamIds[i] as string,
      types[i] as string,
      data[i] as string,
      metadata[i] as string,
    ),
  );

  if (wakeUp === 'in-transaction') {
    await tx`select pg_notify(${wakeUpChannel(schema)}, '')`;
  } else if (wakeUp === 'auto') {
    wakeUpsAfterCommit.get(tx)?.add(schema);
  }
  return stored;
}

/**
 * The event as stored: its data and metadata are the values of the JSON text sent (jsonb keeps the
 * same values; it may order an object's keys differently when read back). Not sending the stored
 * jsonb back saves the server a jsonb rendering per event, and the text is parsed on first read:
 * most callers only want the id.
 */
function storedEvent(
  id: bigint,
  createdAt: Date,
  streamId: string,
  type: string,
  dataJson: string,
  metadataJson: string,
): EventRecord {
  let data: JsonObject | undefined;
  let metadata: JsonObject | undefined;
  return {
    id,
    streamId,
    type,
    get data(): JsonObject {
      return (data ??= JSON.parse(dataJson) as JsonObject);
    },
    get metadata(): JsonObject {
      return (metadata ??= JSON.parse(metadataJson) as JsonObject);
    },
    createdAt,
  };
}

/** Batches up to this size go as one VALUES list (one prepared statement per size); larger ones through unnest(). */
const VALUES_MAX_EVENTS = 64;

/** The metadata of an event that has none: left to the column's default, which is the same. */
const EMPTY_OBJECT_JSON = '{}';

/**
 * One INSERT of every event, returning each new id and created_at (read by position: a pool that
 * renames columns, `transform: postgres.camel`, renames nothing then; created_at as ISO 8601 text in
 * UTC, which no DateStyle, TimeZone or pool's `types` change). The JSON text is cast to jsonb
 * in SQL, so it is encoded exactly once: binding an already serialised string to a jsonb parameter
 * would store a JSON string scalar (docs/design.md §3.1). Ids are drawn in the caller's order: a
 * VALUES list is produced row by row in list order, and a larger batch is sorted by ordinality
 * below the id default. Why VALUES: with RETURNING, INSERT … SELECT FROM unnest() took the server
 * about 50 µs more CPU per statement of one event and 120–150 µs more per ten events than the same
 * insert without RETURNING; a VALUES list with RETURNING took no more than that insert. A batch
 * whose events all have empty metadata leaves that column to its default ('{}'): a quarter fewer
 * parameters for the client to bind and the server to parse.
 */
function insertEvents(
  tx: TransactionSql,
  events: ReturnType<typeof eventsTable>,
  streamIds: readonly string[],
  types: readonly string[],
  data: readonly string[],
  metadata: readonly string[],
): Promise<[id: string, createdAt: string][]> {
  const count = streamIds.length;
  if (count <= VALUES_MAX_EVENTS) {
    const withMetadata = metadata.some((m) => m !== EMPTY_OBJECT_JSON);
    const params: unknown[] = [events];
    for (let i = 0; i < count; i++) {
      params.push(streamIds[i], types[i], data[i]);
      if (withMetadata) params.push(metadata[i]);
    }
    // A tagged-template call with a template made once per shape: the pool's prepare setting and
    // parameter handling apply as for any other statement, without building a fragment per row.
    return valuesOf(tx(valuesTemplate(count, withMetadata), ...(params as never[])));
  }
  return valuesOf(tx`
    insert into ${events} (stream_id, type, data, metadata)
    select u.stream_id, u.type, u.data::jsonb, u.metadata::jsonb
    from unnest(${pgArray(streamIds)}::text[], ${pgArray(types)}::text[], ${pgArray(data)}::text[], ${pgArray(metadata)}::text[])
         with ordinality as u(stream_id, type, data, metadata, n)
    order by u.n
    returning id::text, to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`);
}

const valuesTemplates = new Map<string, TemplateStringsArray>();

/**
 * created_at as ISO 8601 text in UTC, whatever the session's DateStyle, TimeZone or the pool's types
 * (its JSON form would carry the session's offset, which may have seconds: no Date reads that).
 */
const CREATED_AT = `to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

/**
 * The strings of `insert into ${events} (stream_id, type, data, metadata) values (${s}, ${t},
 * ${d}::text::jsonb, ${m}::text::jsonb), … returning …` for `count` rows, as a template literal
 * would pass them; without the metadata column and its parameters when `withMetadata` is false.
 */
function valuesTemplate(count: number, withMetadata: boolean): TemplateStringsArray {
  const key = `${count}${withMetadata ? 'm' : ''}`;
  let template = valuesTemplates.get(key);
  if (!template) {
    const strings = [
      'insert into ',
      withMetadata ? ' (stream_id, type, data, metadata) values (' : ' (stream_id, type, data) values (',
    ];
    const rowEnd = (last: boolean) =>
      last ? `::text::jsonb) returning id::text, ${CREATED_AT}` : '::text::jsonb), (';
    for (let i = 0; i < count; i++) {
      const last = i === count - 1;
      if (withMetadata) strings.push(', ', ', ', '::text::jsonb, ', rowEnd(last));
      else strings.push(', ', ', ', rowEnd(last));
    }
    template = Object.assign([...strings], { raw: [...strings] });
    valuesTemplates.set(key, template);
  }
  return template;
}

/**
 * Runs `fn` in a transaction and, once it has committed, wakes the dispatchers of every schema
 * `fn` appended to: at once in this process, by one coalesced NOTIFY elsewhere (docs/design.md §3.3).
 * A rollback (fn throws) wakes nobody. Returns what `fn` returns.
 *
 * Once the transaction's connection is lost (transaction() then fails with the connection's
 * error), every statement `fn` still makes through `tx` throws TransactionAbandonedError instead of
 * being sent: postgres.js 3.4.9 opens the same connection object again when another statement of
 * the pool is waiting, and would run it there, outside any transaction, where it commits at once
 * (an append() of a transaction that failed would land in the log). Nor does the driver's own
 * ROLLBACK or COMMIT go out (connections/guarded-transaction.ts).
 */
export async function transaction<T>(sql: Sql, fn: (tx: TransactionSql) => Promise<T>): Promise<T> {
  requirePool(sql);
  if (typeof fn !== 'function') throw new InvalidOptionError('fn', 'must be a function of the transaction');
  const schemas = new Set<string>();
  const result = await guardedBegin(
    sql,
    (tx) => {
      trackWakeUps(tx, schemas);
      return fn(tx);
    },
    { applicationCode: true },
  );
  for (const schema of schemas) wakeUpNotifierFor(sql, schema).poke();
  return result;
}

/**
 * Keys `schemas` by `tx` and by every savepoint opened from it, however deeply nested. Not an
 * AsyncLocalStorage: on Node 20 a store, once used, puts a hook on every promise of the process,
 * which cost each append transaction about 30 µs of Node CPU in a scratch benchmark.
 */
function trackWakeUps(tx: TransactionSql, schemas: Set<string>): void {
  wakeUpsAfterCommit.set(tx, schemas);
  const savepoint = tx.savepoint.bind(tx) as (...args: unknown[]) => Promise<unknown>;
  const tracked = (...args: unknown[]): Promise<unknown> => {
    const last = args.length - 1;
    const body = args[last];
    if (typeof body === 'function') {
      args[last] = (sp: TransactionSql) => {
        trackWakeUps(sp, schemas);
        return (body as (sp: TransactionSql) => unknown)(sp);
      };
    }
    return savepoint(...args);
  };
  tx.savepoint = tracked as TransactionSql['savepoint'];
}

/** An event's field, read once: a getter that throws is the event's fault, said as such. */
function readField(index: number, event: Record<string, unknown>, name: string): unknown {
  try {
    return event[name];
  } catch (error) {
    throw new InvalidEventError(index, name, `could not be read: ${messageOf(error)}`);
  }
}

function checkName(index: number, field: string, value: unknown): string {
  if (typeof value !== 'string' || value === '') {
    throw new InvalidEventError(index, field, 'must be a non-empty string');
  }
  if (value.includes('\u0000')) throw new InvalidEventError(index, field, 'must not contain NUL characters');
  // A lone surrogate would be stored as U+FFFD: two different ids could become one.
  if (LONE_SURROGATE.test(value)) throw new InvalidEventError(index, field, LONE_SURROGATE_PROBLEM);
  if (exceedsUtf8Bytes(MAX_NAME_BYTES, value)) {
    throw new InvalidEventError(index, field, `must be at most ${MAX_NAME_BYTES} bytes`);
  }
  return value;
}

/**
 * Records the active span's W3C traceparent, so handler spans can link to the request
 * (docs/design.md §7).
 */
function withTraceparent(metadata: unknown, traceparent: string | undefined): unknown {
  if (traceparent === undefined || !isRecord(metadata) || 'traceparent' in metadata) return metadata;
  return { ...metadata, traceparent };
}

/**
 * Whether `text` and `more` take more than `limit` bytes of UTF-8. No UTF-16 unit takes more than
 * 3 bytes (a surrogate pair takes 4 for its two units), so text of at most limit / 3 units is not
 * counted: the usual case, far below the limit.
 */
function exceedsUtf8Bytes(limit: number, text: string, more = ''): boolean {
  return (text.length + more.length) * 3 > limit && Buffer.byteLength(text) + Buffer.byteLength(more) > limit;
}

function isAscending(ids: readonly bigint[]): boolean {
  for (let i = 1; i < ids.length; i++) if ((ids[i - 1] as bigint) > (ids[i] as bigint)) return false;
  return true;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Whether JSON text holds an escaped U+0000 (JSON.stringify writes it as \u0000 in keys and strings).
 * A backslash in JSON text always starts an escape, so the match must follow an even run of them:
 * "\\u0000" is an escaped backslash followed by the letters u0000. Checked on the text, because
 * a replacer function would take JSON.stringify off its fast path for every event.
 */
function containsEscapedNul(json: string): boolean {
  return json.includes('\\u0000') && /(?:^|[^\\])(?:\\\\)*\\u0000/.test(json);
}

/** A lone UTF-16 surrogate: in unicode mode a well-formed pair is one code point, not a surrogate. */
const LONE_SURROGATE = /\p{Cs}/u;
const LONE_SURROGATE_PROBLEM =
  'must not contain a lone UTF-16 surrogate (half of a surrogate pair, which has no UTF-8 form)';

/**
 * Whether JSON text escapes a lone surrogate: JSON.stringify writes well-formed pairs as they are
 * and a lone surrogate as \udXXX (in keys and strings), which jsonb refuses, aborting the caller's
 * transaction. An even run of backslashes before it is escaped backslashes, as for NUL.
 */
function containsEscapedLoneSurrogate(json: string): boolean {
  return /\\u[dD][89a-fA-F]/.test(json) && /(?:^|[^\\])(?:\\\\)*\\u[dD][89a-fA-F][0-9a-fA-F]{2}/.test(json);
}

function toJsonObject(index: number, field: string, value: unknown): string {
  if (!isRecord(value)) {
    throw new InvalidEventError(index, field, 'must be a JSON object (not a string, array or null)');
  }
  let json: string | undefined;
  try {
    json = JSON.stringify(value);
  } catch (error) {
    throw new InvalidEventError(index, field, `is not JSON-serialisable (${messageOf(error)})`);
  }
  // A toJSON() method can turn an object into anything (a Date becomes a string).
  if (typeof json !== 'string' || !json.startsWith('{')) {
    throw new InvalidEventError(index, field, 'must serialise to a JSON object');
  }
  // jsonb cannot store U+0000; say so here instead of failing the caller's transaction.
  if (containsEscapedNul(json))
    throw new InvalidEventError(index, field, 'must not contain the character U+0000');
  if (containsEscapedLoneSurrogate(json)) throw new InvalidEventError(index, field, LONE_SURROGATE_PROBLEM);
  return json;
}

/**
 * Every error code a user of Sluice can meet, in one list, with where it comes from:
 *   'thrown'    a SluiceError (a class below) thrown by @sluice/core or @sluice/admin;
 *   'ops-route' answered by the ops routes of @sluice/fastify themselves (bad request, no credentials…);
 *   'cli'       reported by the `sluice` CLI for a failure that is not a Sluice error of its own.
 * Each code has a heading in docs/errors.md (errors.test.ts enforces it). HTTP statuses are mapped
 * in @sluice/fastify and exit codes in the CLI, never here.
 */
export const ERROR_CODES = {
  SLUICE_INVALID_OPTION: 'thrown',
  SLUICE_INVALID_EVENT: 'thrown',
  SLUICE_EVENTS_NOT_STORED: 'thrown',
  SLUICE_SCHEMA_NOT_MIGRATED: 'thrown',
  SLUICE_SEQUENCE_CACHED: 'thrown',
  SLUICE_XID_GUARD_MISSING: 'thrown',
  SLUICE_POSTGRES_UNSUPPORTED: 'thrown',
  SLUICE_MIGRATION_FAILED: 'thrown',
  SLUICE_MIGRATION_MODIFIED: 'thrown',
  SLUICE_NOT_REGISTERED: 'thrown',
  SLUICE_DISPATCHER_STOPPED: 'thrown',
  SLUICE_PRUNE_BLOCKED: 'thrown',
  SLUICE_CONSUMER_NOT_FOUND: 'thrown',
  SLUICE_EVENT_NOT_FOUND: 'thrown',
  SLUICE_DEAD_LETTER_NOT_FOUND: 'thrown',
  SLUICE_CONSUMER_BUSY: 'thrown',
  SLUICE_SKIP_MISMATCH: 'thrown',
  SLUICE_BELOW_RETENTION_FLOOR: 'thrown',
  SLUICE_BEYOND_HEAD: 'thrown',
  SLUICE_NOT_A_GAP: 'thrown',
  SLUICE_GAP_HELD: 'thrown',
  SLUICE_CONNECT_TIMEOUT: 'thrown',
  SLUICE_TRANSACTION_ABANDONED: 'thrown',
  SLUICE_TRANSACTION_CONTROL: 'thrown',
  SLUICE_LANE_CHANGE_IN_PROGRESS: 'thrown',
  SLUICE_KEY_NOT_PARKED: 'thrown',
  SLUICE_REBUILD_NOT_FOUND: 'thrown',
  SLUICE_REBUILD_STATE: 'thrown',
  SLUICE_REBUILD_NOT_READY: 'thrown',
  SLUICE_INVALID_REQUEST: 'ops-route',
  SLUICE_UNAUTHORIZED: 'ops-route',
  SLUICE_CROSS_SITE_REQUEST: 'ops-route',
  SLUICE_ROUTE_NOT_FOUND: 'ops-route',
  SLUICE_READ_ONLY: 'ops-route',
  SLUICE_UNSUPPORTED_MEDIA_TYPE: 'ops-route',
  SLUICE_DATABASE_UNAVAILABLE: 'ops-route',
  SLUICE_INTERNAL: 'ops-route',
  SLUICE_USAGE: 'cli',
  SLUICE_DATABASE_UNREACHABLE: 'cli',
  SLUICE_UNEXPECTED: 'cli',
} as const satisfies Record<`SLUICE_${string}`, 'thrown' | 'ops-route' | 'cli'>;

type CodeFrom<Source> = {
  [K in keyof typeof ERROR_CODES]: (typeof ERROR_CODES)[K] extends Source ? K : never;
}[keyof typeof ERROR_CODES];

/** The code of a SluiceError. */
export type SluiceErrorCode = CodeFrom<'thrown'>;
/** A code the ops routes answer with themselves. */
export type OpsRouteErrorCode = CodeFrom<'ops-route'>;
/** A code the CLI reports for a failure that is not a Sluice error. */
export type CliErrorCode = CodeFrom<'cli'>;

export class SluiceError extends Error {
  readonly code: SluiceErrorCode;

  constructor(code: SluiceErrorCode, message: string, options?: ErrorOptions) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}

/** An option passed to a Sluice function is missing or out of range. */
export class InvalidOptionError extends SluiceError {
  readonly option: string;

  constructor(option: string, problem: string) {
    super('SLUICE_INVALID_OPTION', `Invalid option \`${option}\`: ${problem}`);
    this.option = option;
  }
}

/** runOnce() was called before the consumers' rows were registered. */
export class DispatcherNotRegisteredError extends SluiceError {
  constructor() {
    super(
      'SLUICE_NOT_REGISTERED',
      'The dispatcher has not registered its consumers: call start() or ensureRegistered() before runOnce()',
    );
  }
}

/** start() was called on a dispatcher that was stopped: a stopped dispatcher is done for good. */
export class DispatcherStoppedError extends SluiceError {
  constructor() {
    super(
      'SLUICE_DISPATCHER_STOPPED',
      'A stopped dispatcher cannot start or run again: create a new one with createDispatcher()',
    );
  }
}

/** An event given to append() is malformed; nothing was written. */
export class InvalidEventError extends SluiceError {
  readonly index: number;
  readonly field: string;

  constructor(index: number, field: string, problem: string) {
    super('SLUICE_INVALID_EVENT', `Event #${index}: \`${field}\` ${problem}; nothing was appended`);
    this.index = index;
    this.field = field;
  }
}

/**
 * The events table answered append()'s insert with fewer rows than it was sent: something of the
 * database's (a BEFORE INSERT trigger returning NULL, a rule) changed the insert, and which events
 * were stored cannot be told.
 */
export class EventsNotStoredError extends SluiceError {
  readonly schema: string;
  readonly sent: number;
  readonly stored: number;

  constructor(schema: string, sent: number, stored: number) {
    super(
      'SLUICE_EVENTS_NOT_STORED',
      `${schema}.events stored ${stored} of the ${sent} events append() sent: a trigger or rule on the ` +
        'table changed the insert. Roll the transaction back; remove what changes inserts into the events table',
    );
    this.schema = schema;
    this.sent = sent;
    this.stored = stored;
  }
}

/** The Sluice schema (or one of its tables) does not exist in this database. */
export class SchemaNotMigratedError extends SluiceError {
  readonly schema: string;

  /** `behind`: the schema is migrated, but to an older migration than this release's last one. */
  constructor(schema: string, behind?: { readonly applied: number; readonly needed: number }) {
    super(
      'SLUICE_SCHEMA_NOT_MIGRATED',
      behind === undefined
        ? `Sluice schema "${schema}" is not migrated in this database: call migrate(sql, { schema: '${schema}' }) first`
        : `Sluice schema "${schema}" is migrated up to migration ${behind.applied}, and this release needs ${behind.needed}: call migrate(sql, { schema: '${schema}' }) first`,
    );
    this.schema = schema;
  }
}

/** The events id sequence caches values, which breaks id ordering across sessions (docs/design.md §3.2). */
export class SequenceCachedError extends SluiceError {
  readonly sequence: string;
  readonly cacheSize: bigint;

  constructor(sequence: string, cacheSize: bigint) {
    super(
      'SLUICE_SEQUENCE_CACHED',
      `Sequence ${sequence} has CACHE ${cacheSize}: sessions would take ids out of allocation order and ` +
        `events could be skipped. Run ALTER SEQUENCE ${sequence} CACHE 1.`,
    );
    this.sequence = sequence;
    this.cacheSize = cacheSize;
  }
}

/** The trigger that gives appending transactions their xid before any id is drawn is missing or disabled. */
export class XidGuardMissingError extends SluiceError {
  readonly table: string;

  constructor(table: string, detail: string) {
    super(
      'SLUICE_XID_GUARD_MISSING',
      `${table}: ${detail}. Without it a late-committing event can be skipped for good (docs/design.md §3.2). ` +
        `Re-create it by re-running the Sluice migrations on a fresh schema, or ALTER TABLE ${table} ` +
        `ENABLE ALWAYS TRIGGER events_assign_xid if it was only disabled.`,
    );
    this.table = table;
  }
}

/** The PostgreSQL server is older than Sluice supports, or its sessions have a setting Sluice cannot work with. */
export class PostgresUnsupportedError extends SluiceError {
  readonly serverVersionNum: number;
  /**
   * A setting of the sessions Sluice cannot work with, and its value: a DateStyle whose output is
   * not ISO, or array_nulls off. Undefined when the server's version is what is unsupported.
   */
  readonly setting: { readonly name: 'DateStyle' | 'array_nulls'; readonly value: string } | undefined;

  constructor(
    serverVersionNum: number,
    minimum: number,
    setting?: { readonly name: 'DateStyle' | 'array_nulls'; readonly value: string },
  ) {
    super('SLUICE_POSTGRES_UNSUPPORTED', unsupportedMessage(serverVersionNum, minimum, setting));
    this.serverVersionNum = serverVersionNum;
    this.setting = setting;
  }
}

function unsupportedMessage(
  serverVersionNum: number,
  minimum: number,
  setting: { readonly name: 'DateStyle' | 'array_nulls'; readonly value: string } | undefined,
): string {
  if (setting === undefined) {
    return `PostgreSQL ${serverVersionNum} is not supported: Sluice needs ${minimum} or newer`;
  }
  if (setting.name === 'DateStyle') {
    return (
      `DateStyle '${setting.value}' is not supported: postgres.js reads times written as ISO 8601 only, ` +
      "so Sluice's would be wrong. Set it on your pool (connection: { DateStyle: 'ISO, DMY' }, " +
      "keeping your date order) or in the database (ALTER DATABASE … SET datestyle = 'ISO, DMY')"
    );
  }
  return (
    `array_nulls '${setting.value}' is not supported: the arrays Sluice sends have NULL elements. ` +
    'Turn it on for the database or the role (ALTER DATABASE … SET array_nulls = on)'
  );
}

/** A migration failed to apply; the whole migration transaction was rolled back. */
export class MigrationFailedError extends SluiceError {
  readonly version: number;
  readonly sqlState: string | undefined;

  constructor(version: number, name: string, cause: unknown) {
    const sqlState = sqlStateOf(cause);
    super(
      'SLUICE_MIGRATION_FAILED',
      `Migration ${name} failed${sqlState ? ` (SQLSTATE ${sqlState})` : ''}: ${messageOf(cause)}. ` +
        `Nothing was applied.`,
      { cause },
    );
    this.version = version;
    this.sqlState = sqlState;
  }
}

/** An applied migration's text differs from the one shipped: migrations are never edited after release. */
export class MigrationModifiedError extends SluiceError {
  readonly version: number;

  constructor(version: number, name: string) {
    super(
      'SLUICE_MIGRATION_MODIFIED',
      `Migration ${name} was applied with different contents than this version of Sluice ships. ` +
        `Migrations are never edited after release; check which @sluice/core versions write to this database.`,
    );
    this.version = version;
  }
}

/**
 * Whether a PostgreSQL error was raised inside a function or trigger (it has a context, `where`),
 * not by the statement itself: a user's trigger, for instance.
 */
export function raisedInFunction(error: unknown): boolean {
  try {
    const where = (error as { where?: unknown } | null)?.where;
    return typeof where === 'string' && where !== '';
  } catch {
    return false;
  }
}

/**
 * What a statement of Sluice's on `schema` failed with, said as a missing migration when it is an
 * undefined_table raised by the statement itself; one with a context (`where`) came from a
 * function or trigger of the database's, which the error itself describes better.
 */
export function notMigratedOr(error: unknown, schema: string): unknown {
  return sqlStateOf(error) === '42P01' && !raisedInFunction(error)
    ? new SchemaNotMigratedError(schema)
    : error;
}

export function sqlStateOf(error: unknown): string | undefined {
  try {
    if (typeof error === 'object' && error !== null && 'code' in error && typeof error.code === 'string') {
      return /^[0-9A-Z]{5}$/.test(error.code) ? error.code : undefined;
    }
  } catch {
    // A handler's error whose code cannot be read (a throwing getter or trap) has no SQLSTATE.
  }
  return undefined;
}

/** The most characters of an error's text Sluice keeps (logs, last_error, dead letters, parked keys). */
export const MAX_ERROR_TEXT = 8_192;

/**
 * The text of an error as Sluice logs and stores it (last_error, dead letters, parked keys). Any
 * error a handler throws has one: a NUL becomes U+FFFD (PostgreSQL text cannot hold it, and the
 * failure must still be recorded and counted), and a message that cannot be read is said so. A
 * longer text than {@link MAX_ERROR_TEXT} is cut there, saying how much was left out: every
 * pre-check reads a dead consumer's last error, and a handler's error may carry a whole response.
 */
export function messageOf(error: unknown): string {
  let text: string;
  try {
    text = String(error instanceof Error ? error.message : error);
  } catch {
    return 'an error whose message could not be read';
  }
  if (text.length > MAX_ERROR_TEXT) {
    // Not between the two halves of a surrogate pair.
    const cut = /[\uD800-\uDBFF]/.test(text.charAt(MAX_ERROR_TEXT - 1)) ? MAX_ERROR_TEXT - 1 : MAX_ERROR_TEXT;
    text = `${text.slice(0, cut)}… (${text.length - cut} more characters)`;
  }
  return text.includes('\u0000') ? text.replaceAll('\u0000', '\uFFFD') : text;
}

/** prune() would delete events that registered consumers still need; nothing was deleted. */
export class PruneBlockedError extends SluiceError {
  readonly laggingConsumers: readonly string[];

  constructor(before: bigint, lagging: readonly string[]) {
    super(
      'SLUICE_PRUNE_BLOCKED',
      `Prune before ${before} would drop events still needed by: ${lagging.join(', ')}. ` +
        'Nothing was deleted; prune below their cursors and pending gaps, or repair or restart those consumers first.',
    );
    this.laggingConsumers = lagging;
  }
}

/** No cursor row with this name (and instance id) exists. */
export class ConsumerNotFoundError extends SluiceError {
  readonly consumer: string;
  readonly instanceId: string | undefined;

  constructor(consumer: string, instanceId?: string) {
    super(
      'SLUICE_CONSUMER_NOT_FOUND',
      `No consumer "${consumer}"${instanceId === undefined ? '' : ` with instance id "${instanceId}"`} is registered`,
    );
    this.consumer = consumer;
    this.instanceId = instanceId;
  }
}

/** No event with this id is in the log: never appended, rolled back, or pruned. */
export class EventNotFoundError extends SluiceError {
  readonly eventId: bigint;

  constructor(eventId: bigint) {
    super(
      'SLUICE_EVENT_NOT_FOUND',
      `No event ${eventId} is in the log (never appended, rolled back, or pruned)`,
    );
    this.eventId = eventId;
  }
}

/** No dead letter with this id belongs to the consumer (and instance) named. */
export class DeadLetterNotFoundError extends SluiceError {
  readonly deadLetterId: bigint;

  constructor(consumer: string, deadLetterId: bigint) {
    super('SLUICE_DEAD_LETTER_NOT_FOUND', `Consumer "${consumer}" has no dead letter ${deadLetterId}`);
    this.deadLetterId = deadLetterId;
  }
}

/** A turn (or another operator) held the consumer's row longer than the lock timeout; nothing changed. */
export class ConsumerBusyError extends SluiceError {
  readonly consumer: string;

  /**
   * `why`: true when its rows kept changing under the action (a change of its lane count under
   * way); `{ sharedGap }` when a fence of that id waited for another consumer's row, which has a
   * pending gap there too (its turn, or another action, held it); 'prune' when a prune of the log
   * held the retention lock the action waits for (a restart's).
   */
  constructor(
    consumer: string,
    lockTimeoutMs: number,
    why: boolean | { readonly sharedGap: bigint } | 'prune' = false,
  ) {
    super(
      'SLUICE_CONSUMER_BUSY',
      why === true
        ? `Consumer "${consumer}" is changing its lanes: they moved while the action held them; nothing was changed. Try again.`
        : why === 'prune'
          ? `A prune of the log held the retention lock for more than ${lockTimeoutMs} ms while the action on "${consumer}" waited for it; nothing was changed. Try again once the prune is done.`
          : typeof why === 'object'
            ? `Another consumer with a pending gap at ${why.sharedGap} was held by its turn or by another action (the fence tells it to look again); nothing was changed for "${consumer}". Try again.`
            : `Consumer "${consumer}" is in a turn that held its row for more than ${lockTimeoutMs} ms; nothing was changed. Try again.`,
    );
    this.consumer = consumer;
  }
}

/**
 * A change of the consumer's lane count has switched over and its old lanes still drain their
 * pending gaps (docs/design.md §11.3): another change must wait until they are gone.
 */
export class LaneChangeInProgressError extends SluiceError {
  readonly consumer: string;

  constructor(consumer: string, from: number, to: number) {
    super(
      'SLUICE_LANE_CHANGE_IN_PROGRESS',
      `Consumer "${consumer}" is still changing from ${from} to ${to} lanes: its old lanes resolve their pending gaps first. Try again once the change is done (diagnose shows it).`,
    );
    this.consumer = consumer;
  }
}

/** An operator named a key that is not parked for the consumer; nothing changed. */
export class KeyNotParkedError extends SluiceError {
  readonly consumer: string;
  readonly key: string;

  constructor(consumer: string, key: string) {
    super('SLUICE_KEY_NOT_PARKED', `Consumer "${consumer}" has no parked key ${JSON.stringify(key)}`);
    this.consumer = consumer;
    this.key = key;
  }
}

/**
 * An operator named a rebuild (a version of a consumer, docs/design.md §12) that does not exist:
 * no version of the consumer is being rebuilt, or not that version. Nothing changed.
 */
export class RebuildNotFoundError extends SluiceError {
  readonly consumer: string;

  constructor(consumer: string, detail: string) {
    super('SLUICE_REBUILD_NOT_FOUND', `Consumer "${consumer}": ${detail}`);
    this.consumer = consumer;
  }
}

/** An operator action on a version that its state does not allow (a paused rebuild approved…). */
export class RebuildStateError extends SluiceError {
  readonly consumer: string;
  readonly version: number;
  readonly state: string;

  constructor(consumer: string, version: number, state: string, detail: string) {
    super('SLUICE_REBUILD_STATE', `Consumer "${consumer}" version ${version} is ${state}: ${detail}`);
    this.consumer = consumer;
    this.version = version;
    this.state = state;
  }
}

/**
 * A takeover was approved for a rebuild still far behind the log head: the live version would stop
 * until it caught up. Nothing changed; approve it once it is closer (or with force).
 */
export class RebuildNotReadyError extends SluiceError {
  readonly consumer: string;
  readonly version: number;
  readonly lagEvents: bigint;
  readonly withinEvents: bigint;

  constructor(consumer: string, version: number, lagEvents: bigint, withinEvents: bigint) {
    super(
      'SLUICE_REBUILD_NOT_READY',
      `Consumer "${consumer}" version ${version} is ${lagEvents} events behind the log head (it takes over within ${withinEvents}): the live version would stop until it caught up. Approve it once it is closer, or with force.`,
    );
    this.consumer = consumer;
    this.version = version;
    this.lagEvents = lagEvents;
    this.withinEvents = withinEvents;
  }
}

/** skip() names an event the consumer is not stuck on; nothing changed. */
export class SkipMismatchError extends SluiceError {
  readonly requestedEventId: bigint;
  readonly stuckEventId: bigint | null;

  constructor(consumer: string, requested: bigint, stuck: bigint | null) {
    super(
      'SLUICE_SKIP_MISMATCH',
      stuck === null
        ? `Consumer "${consumer}" is not stuck on any event; refusing to skip event ${requested}`
        : `Consumer "${consumer}" is stuck on event ${stuck}, not ${requested}; refusing to skip`,
    );
    this.requestedEventId = requested;
    this.stuckEventId = stuck;
  }
}

/** A restart would start below the retention floor: pruned events would be skipped silently. */
export class BelowRetentionFloorError extends SluiceError {
  readonly floor: bigint;

  constructor(requested: bigint, floor: bigint) {
    super(
      'SLUICE_BELOW_RETENTION_FLOOR',
      `Events below ${floor} were pruned; a restart from ${requested} would skip them silently. ` +
        `Restart from ${floor - 1n} or later (or from 'beginning', which starts before every kept event).`,
    );
    this.floor = floor;
  }
}

/**
 * A position above the log head: a restart's cursor, a prune's retention floor or a new version's
 * rebuild start there would claim events that do not exist yet (as processed, or as pruned).
 */
export class BeyondHeadError extends SluiceError {
  readonly head: bigint;

  /** `message`: what was refused and why; a restart's by default. */
  constructor(
    requested: bigint,
    head: bigint,
    message = `Cannot restart from ${requested}: the log head is ${head}`,
  ) {
    super('SLUICE_BEYOND_HEAD', message);
    this.head = head;
  }
}

/** fenceGap() names an id that is not in one of the consumer's pending gaps. */
export class NotAGapError extends SluiceError {
  readonly eventId: bigint;

  constructor(consumer: string, eventId: bigint, why: string) {
    super('SLUICE_NOT_A_GAP', `Event id ${eventId} is not a pending gap of consumer "${consumer}": ${why}`);
    this.eventId = eventId;
  }
}

/** A transaction still owns the id an operator tried to fence; nothing changed. */
export class GapHeldError extends SluiceError {
  readonly eventId: bigint;

  constructor(eventId: bigint) {
    super(
      'SLUICE_GAP_HELD',
      `A running transaction still owns event id ${eventId} (its insert is not committed); it cannot be fenced. ` +
        'Find it with diagnose() and end it, or wait for it.',
    );
    this.eventId = eventId;
  }
}

/**
 * No PostgreSQL startup completed at the pool's address in time: nothing answers there, or what
 * answers is not PostgreSQL (see withinConnectTimeout()).
 */
export class ConnectTimeoutError extends SluiceError {
  readonly address: string;
  readonly timeoutMs: number;

  /**
   * `cause`: the driver's error when the peer answered in another protocol (postgres.js 4 says so
   * at once, before the time is up; the message then says that instead).
   */
  constructor(address: string, timeoutMs: number, cause?: unknown) {
    super(
      'SLUICE_CONNECT_TIMEOUT',
      cause === undefined
        ? `no PostgreSQL server completed a connection at ${address} within ${timeoutMs / 1000} s: ` +
            'check the host and port (is a PostgreSQL server listening there, and not another service?)'
        : `no PostgreSQL server completed a connection at ${address}: what answers there does not speak ` +
            "PostgreSQL's protocol: check the host and port (is it another service?)",
      cause === undefined ? undefined : { cause },
    );
    this.address = address;
    this.timeoutMs = timeoutMs;
  }
}

/**
 * The transaction's connection was lost, or the transaction was ended: a statement made through it
 * afterwards is refused, not sent (docs/design.md §4.11: on postgres.js 3.4.9 it could otherwise
 * run outside any transaction, on the connection the pool opened again).
 */
export class TransactionAbandonedError extends SluiceError {
  constructor() {
    super(
      'SLUICE_TRANSACTION_ABANDONED',
      "the transaction's connection was lost; the rest of the transaction is abandoned",
    );
  }
}

/**
 * A statement that would end the transaction (COMMIT, END, ROLLBACK, ABORT, PREPARE TRANSACTION) was
 * made through the `tx` of a turn (a transactional handler's `ctx.tx`) or of `transaction()`. It
 * was not sent: the transaction's end is Sluice's, and ending it early would commit a handler's
 * writes before the cursor moves, and let go of the consumer's row mid-turn (docs/design.md §4.11).
 */
export class TransactionControlError extends SluiceError {
  readonly statement: string;

  constructor(statement: string) {
    super(
      'SLUICE_TRANSACTION_CONTROL',
      `a statement that ends the transaction (${statement}) cannot be run through Sluice's tx: ` +
        'return from the handler (or the transaction() callback) to commit, throw to roll back, or use ' +
        'tx.savepoint() to undo part of it',
    );
    this.statement = statement;
  }
}

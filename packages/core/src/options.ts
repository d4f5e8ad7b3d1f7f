import type { MeterProvider, TracerProvider } from '@opentelemetry/api';
import type { Consumer, ErrorPolicy, RebuildOptions } from './consumers/consumer.js';
import type { EventRecord } from './events.js';
import { InvalidOptionError } from './errors.js';
import {
  isSharedInstanceId,
  MAX_LANES,
  parseLaneInstanceId,
  STREAM_KEY,
  type Lane,
  type LaneKey,
} from './lanes/lanes.js';
import type { Ordering } from './gaps/gaps.js';
import { consoleLogger, neverThrowing, type Logger } from './logger.js';
import { resolveSchemaName } from './schema/tables.js';
import type { Sql } from './sql-types.js';

/** The instance id under which shared consumers keep their single cursor row. */
export const SHARED_INSTANCE_ID = '*';

const SECOND_MS = 1000;
const MINUTE_MS = 60 * SECOND_MS;

export interface DispatcherOptions {
  /** A postgres.js pool on the primary. Never a replica: its visibility order can differ (docs/design.md §3.2). */
  sql: Sql;
  consumers: readonly Consumer[];
  /** @defaultValue 'sluice' */
  schema?: string;
  /** This process's id; required by per-instance consumers (their rows, spans and the LISTEN connection name). */
  instanceId?: string;
  /** Events per turn. @defaultValue 100 */
  batchSize?: number;
  /**
   * While a consumer is behind, each turn that fills its batch doubles the next one, up to this
   * (fewer commits per event when catching up); a short fetch or a failure goes back to batchSize.
   * Set it to batchSize to keep batches fixed. @defaultValue 10 × batchSize
   */
  maxBatchSize?: number;
  /** A turn commits what it has done after this long; the next turn continues. @defaultValue 5_000 */
  maxTurnMs?: number;
  /** Safety-net poll interval. @defaultValue 100 */
  pollIntervalMs?: number;
  /** Default failures on one event before a consumer is dead. @defaultValue 10 */
  maxAttempts?: number;
  /** A dead consumer is re-armed after this long. @defaultValue 300_000 (5 min) */
  rearmCooldownMs?: number;
  /** Re-arms allowed since the consumer's cursor last advanced. @defaultValue 3 */
  maxRearmCount?: number;
  /** Turns running at once (each holds a pool connection). @defaultValue 4 */
  concurrency?: number;
  /** LISTEN for wake-ups (polling stays on). @defaultValue true */
  listen?: boolean;
  /**
   * Where to LISTEN, when `sql` cannot: a pool connected to PostgreSQL directly, for a dispatcher
   * whose `sql` goes through a transaction pooler such as PgBouncer (LISTEN needs a session of its
   * own). Only its connection options are used, for the one LISTEN connection.
   * @defaultValue `sql`
   */
  listenSql?: Sql;
  /**
   * The LISTEN connection is checked this often with a `select 1` on it; a check still unanswered at
   * the next one means the socket is dead without having closed (a silent network drop), and
   * LISTEN reconnects. @defaultValue 30_000
   */
  listenCheckMs?: number;
  /** Per-call bound on a handler. @defaultValue 30_000 */
  handlerTimeoutMs?: number;
  /** SET LOCAL statement_timeout for a turn's statements. @defaultValue 30_000 */
  statementTimeoutMs?: number;
  /** Per-instance rows record last_seen_at at most this often, on a pass. @defaultValue 30_000 */
  heartbeatIntervalMs?: number;
  /**
   * After a handler failure the consumer waits this long before the next attempt, doubling with
   * each failed attempt up to retryMaxDelayMs (shared by all instances: it counts from last_error_at).
   * @defaultValue 100
   */
  retryDelayMs?: number;
  /** @defaultValue 30_000 */
  retryMaxDelayMs?: number;
  /** First infra-failure backoff; doubles up to backoffMaxMs. @defaultValue 1_000 */
  backoffInitialMs?: number;
  /** @defaultValue 60_000 */
  backoffMaxMs?: number;
  /**
   * Record each delivering turn in a committed statement first, so handlers that crash the
   * process still use up maxAttempts (one extra statement per delivering turn). @defaultValue true
   */
  countCrashedAttempts?: boolean;
  /** Decides per pass whether a consumer with `featureName` runs. @defaultValue every feature enabled */
  isFeatureEnabled?: (featureName: string) => boolean;
  /** @defaultValue console */
  logger?: Logger;
  /** @defaultValue the global meter provider of @opentelemetry/api (a no-op without an SDK) */
  meterProvider?: MeterProvider;
  /** @defaultValue the global tracer provider of @opentelemetry/api */
  tracerProvider?: TracerProvider;
}

/**
 * The longest duration option (about 24.8 days): the largest delay a Node.js timer keeps (a longer
 * one fires at once) and the largest timeout PostgreSQL's settings take.
 */
export const MAX_MS = 2 ** 31 - 1;
/** The longest age option, only compared with times (a re-arm cooldown, an instance's silence): ten years. */
export const MAX_AGE_MS = 315_360_000_000;
/**
 * The longest lockTimeoutMs of an admin: the Fastify plugin retires an admin's pool that long plus
 * 30 s after its last action, and that delay is a timer's.
 */
export const MAX_LOCK_TIMEOUT_MS = MAX_MS - 30_000;
/** The most attempts an error policy may allow: attempts are PostgreSQL integers in the tables. */
export const MAX_ATTEMPTS = 2 ** 31 - 1;
/**
 * The largest batchSize (maxBatchSize: ten times it). A batch is read into memory at once; the
 * bound keeps a lane's batch (batchSize × lanes) and the default maxBatchSize exact numbers.
 */
export const MAX_BATCH_SIZE = 1_000_000_000;

/** The dispatcher's numeric options bounded otherwise than a duration (MAX_MS) or not at all. */
const LARGEST: Partial<Record<string, number>> = {
  rearmCooldownMs: MAX_AGE_MS,
  maxAttempts: MAX_ATTEMPTS,
  batchSize: MAX_BATCH_SIZE,
};

export const DEFAULTS = {
  batchSize: 100,
  maxTurnMs: 5 * SECOND_MS,
  pollIntervalMs: 100,
  maxAttempts: 10,
  rearmCooldownMs: 5 * MINUTE_MS,
  maxRearmCount: 3,
  concurrency: 4,
  listen: true,
  listenCheckMs: 30 * SECOND_MS,
  handlerTimeoutMs: 30 * SECOND_MS,
  statementTimeoutMs: 30 * SECOND_MS,
  heartbeatIntervalMs: 30 * SECOND_MS,
  retryDelayMs: 100,
  retryMaxDelayMs: 30 * SECOND_MS,
  backoffInitialMs: SECOND_MS,
  backoffMaxMs: MINUTE_MS,
  countCrashedAttempts: true,
} as const satisfies Partial<DispatcherOptions>;

/**
 * The defaults of the operator actions (AdminOptions in @sluice/admin, and the ops routes of
 * @sluice/fastify, which take the dispatcher's rearmCooldownMs and maxRearmCount from DEFAULTS).
 */
export const ADMIN_DEFAULTS = {
  lockTimeoutMs: 2 * SECOND_MS,
  rearmCooldownMs: DEFAULTS.rearmCooldownMs,
  maxRearmCount: DEFAULTS.maxRearmCount,
  defaultActor: 'operator',
} as const;

export interface ResolvedConsumer {
  readonly name: string;
  readonly definition: Consumer;
  /** Its cursor row's instance id: '*' or this process's instanceId. */
  readonly instanceId: string;
  readonly maxAttempts: number;
  readonly skipApplyErrors: boolean;
  /** errorPolicy.isPermanent, or a predicate that says no; only `true` counts (plain JS may return anything). */
  readonly isPermanent: (error: unknown, event: EventRecord) => unknown;
  readonly startFrom: 'beginning' | 'now';
  readonly ordering: Ordering;
  readonly transactional: boolean;
  readonly handlerTimeoutMs: number;
  readonly batchSize: number;
  readonly maxBatchSize: number;
  /** The lanes this consumer is configured with (1 for per-instance consumers). */
  readonly lanes: number;
  readonly laneKey: LaneKey;
  /** The event types it handles; null: all. */
  readonly types: readonly string[] | null;
  /** errorPolicy.parkKey */
  readonly parkKey: boolean;
  /**
   * The row a dispatcher turns: `name` for a consumer's own row (its shared row '*' or this
   * process's per-instance row), or name and lane instance id for one lane of a laned consumer.
   */
  readonly unit: string;
  /** The lane this row is: null for a per-instance row; lane 0 of 1 for a shared consumer's '*'. */
  readonly lane: Lane | null;
  /** The name it was declared with; `name` is its rows' ('<name>@v<N>' for a rebuilt version). */
  readonly baseName: string;
  /** Its declared version (docs/design.md §12); null: not versioned. */
  readonly version: number | null;
  readonly sideEffects: boolean;
  /** The cursor a new version's rows start at (rebuild.from; 0: the beginning). */
  readonly rebuildFrom: bigint;
  /** null: an operator approves the takeover; else it takes over within this many events of the head. */
  readonly takeoverWithin: bigint | null;
  readonly liveView: { readonly view: string; readonly source: string } | null;
}

/** The consumer rows of `version` of consumer `name` (docs/design.md §12). */
export function versionRowName(name: string, version: number | null, sideEffects: boolean): string {
  return version === null || version === 1 || sideEffects ? name : `${name}${VERSION_SUFFIX}${version}`;
}

/** What ends the row name of a rebuilt version: '<name>@v<N>'. */
export const VERSION_SUFFIX = '@v';
const VERSIONED_NAME = /@v\d+$/;
// Lower case only: Sluice quotes the names it is given, so a mixed-case name would not be the
// relation an unquoted name in the application's SQL folds to.
const RELATION_NAME = /^[a-z_][a-z0-9_$]*(\.[a-z_][a-z0-9_$]*)?$/;

export interface ResolvedOptions extends Omit<
  Required<DispatcherOptions>,
  'consumers' | 'instanceId' | 'meterProvider' | 'tracerProvider' | 'maxBatchSize' | 'listenSql'
> {
  readonly listenSql: Sql | undefined;
  /** undefined: 10 × each consumer's batchSize. */
  readonly maxBatchSize: number | undefined;
  readonly consumers: readonly ResolvedConsumer[];
  readonly instanceId: string | undefined;
  readonly meterProvider: MeterProvider | undefined;
  readonly tracerProvider: TracerProvider | undefined;
}

/**
 * Validates the options once, at construction, and returns a new object with every default applied.
 * @throws {InvalidOptionError} naming the offending option
 */
export function resolveOptions(input: DispatcherOptions): ResolvedOptions {
  if (typeof (input as unknown) !== 'object' || (input as unknown) === null) {
    throw new InvalidOptionError('options', 'must be an object');
  }
  refuseUnknownFields(input as unknown as Record<string, unknown>, DISPATCHER_FIELDS, '', 'the dispatcher');
  requirePool(input.sql);
  if (input.listenSql !== undefined) requirePool(input.listenSql, 'listenSql');
  const schema = resolveSchemaName(input.schema);
  const instanceId = input.instanceId;
  if (instanceId !== undefined) {
    checkStorableName(instanceId, 'instanceId');
    if (isSharedInstanceId(instanceId)) {
      throw new InvalidOptionError(
        'instanceId',
        `must not start with '${SHARED_INSTANCE_ID}': instance ids starting with it are reserved for shared consumers and their lanes`,
      );
    }
  }
  const positive = (name: keyof typeof DEFAULTS, min = 1): number => {
    const value = input[name] ?? DEFAULTS[name];
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) {
      throw new InvalidOptionError(name, `must be an integer of at least ${min}, got ${String(value)}`);
    }
    const max = LARGEST[name] ?? (name.endsWith('Ms') ? MAX_MS : Infinity);
    if (value > max) {
      throw new InvalidOptionError(
        name,
        `must be at most ${max}${name.endsWith('Ms') ? ' (ms)' : ''}, got ${value}`,
      );
    }
    return value;
  };
  const options = {
    sql: input.sql,
    schema,
    instanceId,
    batchSize: positive('batchSize'),
    maxBatchSize:
      // null as undefined: the default (10 × each consumer's batchSize).
      (input.maxBatchSize as number | null | undefined) == null
        ? undefined
        : integer(input.maxBatchSize, 'maxBatchSize', 1, MAX_BATCH_SIZE * 10),
    maxTurnMs: positive('maxTurnMs'),
    pollIntervalMs: positive('pollIntervalMs'),
    maxAttempts: positive('maxAttempts'),
    rearmCooldownMs: positive('rearmCooldownMs', 0),
    maxRearmCount: positive('maxRearmCount', 0),
    concurrency: positive('concurrency'),
    listen: boolean('listen', input.listen, DEFAULTS.listen),
    listenSql: input.listenSql,
    listenCheckMs: positive('listenCheckMs'),
    handlerTimeoutMs: positive('handlerTimeoutMs'),
    statementTimeoutMs: positive('statementTimeoutMs'),
    heartbeatIntervalMs: positive('heartbeatIntervalMs'),
    retryDelayMs: positive('retryDelayMs', 0),
    retryMaxDelayMs: positive('retryMaxDelayMs', 0),
    backoffInitialMs: positive('backoffInitialMs'),
    backoffMaxMs: positive('backoffMaxMs'),
    countCrashedAttempts: boolean(
      'countCrashedAttempts',
      input.countCrashedAttempts,
      DEFAULTS.countCrashedAttempts,
    ),
    isFeatureEnabled: input.isFeatureEnabled ?? (() => true),
    logger: input.logger ?? consoleLogger,
    meterProvider: input.meterProvider,
    tracerProvider: input.tracerProvider,
  };
  if (typeof options.isFeatureEnabled !== 'function') {
    throw new InvalidOptionError('isFeatureEnabled', 'must be a function of a feature name');
  }
  requireLogger(options.logger);
  for (const [option, method] of [
    ['meterProvider', 'getMeter'],
    ['tracerProvider', 'getTracer'],
  ] as const) {
    const provider = options[option] as unknown as Record<string, unknown> | undefined | null;
    // null, as undefined: the global provider.
    if (
      provider !== undefined &&
      provider !== null &&
      (typeof provider !== 'object' || typeof provider[method] !== 'function')
    ) {
      throw new InvalidOptionError(option, `must be an OpenTelemetry ${option} (with ${method}())`);
    }
  }
  if (options.maxBatchSize !== undefined && options.maxBatchSize < options.batchSize) {
    throw new InvalidOptionError('maxBatchSize', `must be at least batchSize (${options.batchSize})`);
  }
  if (options.handlerTimeoutMs + options.statementTimeoutMs > MAX_MS) {
    throw new InvalidOptionError(
      'handlerTimeoutMs',
      `plus statementTimeoutMs must be at most ${MAX_MS} (ms): a turn's idle-in-transaction timeout adds them up`,
    );
  }
  if (options.backoffMaxMs < options.backoffInitialMs) {
    throw new InvalidOptionError('backoffMaxMs', 'must be at least backoffInitialMs');
  }
  if (!Array.isArray(input.consumers) || input.consumers.length === 0) {
    throw new InvalidOptionError('consumers', 'must be a non-empty array of consumers');
  }
  const seen = new Set<string>();
  const seenNames = new Set<string>();
  const unversioned = new Set<string>();
  // Validated as unknown input: JavaScript callers and config files do not respect the types.
  // Array.from: a hole in a sparse array is an undefined consumer, not one skipped.
  const consumers = Array.from(input.consumers as readonly unknown[]).map((raw, index) => {
    const where = `consumers[${index}]`;
    if (typeof raw !== 'object' || raw === null) throw new InvalidOptionError(where, 'must be an object');
    const c = raw as Record<string, unknown>;
    refuseUnknownFields(c, CONSUMER_FIELDS, where, 'a consumer');
    const name = checkStorableName(c['name'], `${where}.name`);
    if (VERSIONED_NAME.test(name)) {
      throw new InvalidOptionError(
        `${where}.name`,
        `must not end with '${VERSION_SUFFIX}<number>': such names are the rows of a consumer's versions`,
      );
    }
    const version = c['version'] === undefined ? null : integer(c['version'], `${where}.version`);
    if (version !== null && version > 2_147_483_647) {
      throw new InvalidOptionError(`${where}.version`, 'must be at most 2147483647');
    }
    const key = `${name}\u0000${version ?? ''}`;
    if (seen.has(key) || (version === null ? seenNames.has(name) : unversioned.has(name))) {
      throw new InvalidOptionError(
        `${where}.name`,
        version === null && !seen.has(key)
          ? `duplicate consumer name "${name}": versions of one consumer each declare a version`
          : `duplicate consumer name "${name}"${version === null ? '' : ` at version ${version}`}`,
      );
    }
    seen.add(key);
    seenNames.add(name);
    if (version === null) unversioned.add(name);
    if (typeof c['handler'] !== 'function')
      throw new InvalidOptionError(`${where}.handler`, 'must be a function');
    if (c['batchHandler'] !== undefined && typeof c['batchHandler'] !== 'function') {
      throw new InvalidOptionError(`${where}.batchHandler`, 'must be a function');
    }
    const delivery = oneOf(
      c['delivery'] ?? 'shared',
      ['shared', 'per-instance'] as const,
      `${where}.delivery`,
    );
    if (delivery === 'per-instance' && instanceId === undefined) {
      throw new InvalidOptionError('instanceId', `is required by the per-instance consumer "${name}"`);
    }
    const startFrom = oneOf(
      c['startFrom'] ?? 'beginning',
      ['beginning', 'now'] as const,
      `${where}.startFrom`,
    );
    const ordering = oneOf(c['ordering'] ?? 'fast', ['fast', 'strict'] as const, `${where}.ordering`);
    const policy = c['errorPolicy'];
    if (policy !== undefined && (typeof policy !== 'object' || policy === null)) {
      throw new InvalidOptionError(`${where}.errorPolicy`, 'must be an object');
    }
    const policyFields = (policy ?? {}) as Record<string, unknown>;
    refuseUnknownFields(policyFields, POLICY_FIELDS, `${where}.errorPolicy`, 'an error policy');
    const maxAttempts = integer(
      policyFields['maxAttempts'] ?? options.maxAttempts,
      `${where}.errorPolicy.maxAttempts`,
      1,
      MAX_ATTEMPTS,
    );
    const skipApplyErrors = policyFields['skipApplyErrors'] ?? false;
    if (typeof skipApplyErrors !== 'boolean') {
      throw new InvalidOptionError(`${where}.errorPolicy.skipApplyErrors`, 'must be a boolean');
    }
    const parkKey = policyFields['parkKey'] ?? false;
    if (typeof parkKey !== 'boolean') {
      throw new InvalidOptionError(`${where}.errorPolicy.parkKey`, 'must be a boolean');
    }
    if (parkKey && skipApplyErrors) {
      throw new InvalidOptionError(
        `${where}.errorPolicy.parkKey`,
        'cannot be combined with skipApplyErrors: an exhausted event either parks its key or goes to the dead letters',
      );
    }
    // A parked key is the consumer's, not an instance's: one instance's replay would deliver it to
    // that instance alone, and the others' cursors have passed it.
    if (parkKey && delivery === 'per-instance') {
      throw new InvalidOptionError(
        `${where}.errorPolicy.parkKey`,
        'is for shared consumers: a per-instance consumer stops on an event that uses up its attempts',
      );
    }
    const isPermanent = policyFields['isPermanent'] ?? NEVER_PERMANENT;
    if (typeof isPermanent !== 'function') {
      throw new InvalidOptionError(`${where}.errorPolicy.isPermanent`, 'must be a function');
    }
    const transactional = c['transactional'] ?? false;
    if (typeof transactional !== 'boolean')
      throw new InvalidOptionError(`${where}.transactional`, 'must be a boolean');
    const batchSize = integer(c['batchSize'] ?? options.batchSize, `${where}.batchSize`, 1, MAX_BATCH_SIZE);
    const maxBatchSize = integer(
      c['maxBatchSize'] ?? options.maxBatchSize ?? batchSize * 10,
      `${where}.maxBatchSize`,
      1,
      MAX_BATCH_SIZE * 10,
    );
    if (maxBatchSize < batchSize) {
      throw new InvalidOptionError(
        c['maxBatchSize'] === undefined ? 'maxBatchSize' : `${where}.maxBatchSize`,
        `must be at least the batchSize of consumer "${name}" (${batchSize})`,
      );
    }
    const lanes = integer(c['lanes'] ?? 1, `${where}.lanes`);
    if (lanes > MAX_LANES) throw new InvalidOptionError(`${where}.lanes`, `must be at most ${MAX_LANES}`);
    if (lanes > 1 && delivery === 'per-instance') {
      throw new InvalidOptionError(
        `${where}.lanes`,
        'is for shared consumers: a per-instance consumer has one lane',
      );
    }
    const laneKey = resolveLaneKey(c['laneKey'], `${where}.laneKey`);
    const types = resolveTypes(c['types'], `${where}.types`);
    const featureName = c['featureName'];
    if (featureName !== undefined && (typeof featureName !== 'string' || featureName === '')) {
      throw new InvalidOptionError(`${where}.featureName`, 'must be a non-empty string');
    }
    const versioning = resolveVersioning(c, where, version, delivery);
    const rowName = versionRowName(name, version, versioning.sideEffects);
    if (Buffer.byteLength(rowName) > 200) {
      throw new InvalidOptionError(
        `${where}.name`,
        `is too long for its version's rows ("${rowName}" is over 200 bytes)`,
      );
    }
    return {
      name: rowName,
      baseName: name,
      version,
      ...versioning,
      definition: raw as Consumer,
      instanceId: delivery === 'shared' ? SHARED_INSTANCE_ID : (instanceId as string),
      maxAttempts,
      skipApplyErrors,
      isPermanent: isPermanent as ResolvedConsumer['isPermanent'],
      startFrom,
      ordering,
      transactional,
      handlerTimeoutMs: integer(
        c['handlerTimeoutMs'] ?? options.handlerTimeoutMs,
        `${where}.handlerTimeoutMs`,
        1,
        MAX_MS - options.statementTimeoutMs,
      ),
      batchSize,
      maxBatchSize,
      lanes,
      laneKey,
      types,
      parkKey,
      unit: rowName,
      lane: delivery === 'shared' ? { index: 0, count: 1 } : null,
    } satisfies ResolvedConsumer;
  });
  return { ...options, logger: neverThrowing(options.logger), consumers };
}

const NEVER_PERMANENT = (): boolean => false;

/** The highest event id (bigint). */
const MAX_EVENT_ID = 9_223_372_036_854_775_807n;

/** sideEffects, rebuild and liveView of a consumer (docs/design.md §12). */
function resolveVersioning(
  c: Record<string, unknown>,
  where: string,
  version: number | null,
  delivery: 'shared' | 'per-instance',
): Pick<ResolvedConsumer, 'sideEffects' | 'rebuildFrom' | 'takeoverWithin' | 'liveView'> {
  const sideEffects = c['sideEffects'] ?? false;
  if (typeof sideEffects !== 'boolean')
    throw new InvalidOptionError(`${where}.sideEffects`, 'must be a boolean');
  const rebuild = c['rebuild'];
  const liveView = c['liveView'];
  if (version === null) {
    for (const field of ['rebuild', 'liveView'] as const) {
      if (c[field] !== undefined) {
        throw new InvalidOptionError(`${where}.${field}`, 'is for a consumer that declares a version');
      }
    }
  } else if (delivery === 'per-instance') {
    throw new InvalidOptionError(
      `${where}.version`,
      'is for shared consumers: a per-instance consumer has a cursor per process, not versions',
    );
  }
  if (rebuild !== undefined && (typeof rebuild !== 'object' || rebuild === null)) {
    throw new InvalidOptionError(`${where}.rebuild`, 'must be an object');
  }
  const r = (rebuild ?? {}) as Record<string, unknown>;
  refuseUnknownFields(r, REBUILD_FIELDS, `${where}.rebuild`, 'rebuild');
  const from = r['from'] ?? 'beginning';
  let rebuildFrom = 0n;
  if (from !== 'beginning') {
    if (
      !(typeof from === 'bigint' && from >= 0n && from <= MAX_EVENT_ID) &&
      !(typeof from === 'number' && Number.isSafeInteger(from) && from >= 0)
    ) {
      throw new InvalidOptionError(
        `${where}.rebuild.from`,
        "must be 'beginning' or an event id (an integer from 0 to 9223372036854775807)",
      );
    }
    if (sideEffects) {
      throw new InvalidOptionError(
        `${where}.rebuild.from`,
        'does not apply to a consumer with side effects: its new version starts where the live one is',
      );
    }
    rebuildFrom = BigInt(from);
  }
  const takeover: unknown = r['takeover'] ?? 'manual';
  let takeoverWithin: bigint | null = null;
  if (takeover !== 'manual') {
    const fields =
      typeof takeover === 'object' && takeover !== null ? (takeover as Record<string, unknown>) : {};
    const within = fields['withinEvents'];
    if (
      typeof within !== 'number' ||
      !Number.isSafeInteger(within) ||
      within < 0 ||
      Object.keys(fields).some((k) => k !== 'withinEvents')
    ) {
      throw new InvalidOptionError(
        `${where}.rebuild.takeover`,
        "must be 'manual' or { withinEvents: <an integer of at least 0> }",
      );
    }
    takeoverWithin = BigInt(within);
  }
  let view: ResolvedConsumer['liveView'] = null;
  if (liveView !== undefined) {
    const v = (typeof liveView === 'object' && liveView !== null ? liveView : {}) as Record<string, unknown>;
    const valid = (x: unknown): x is string =>
      typeof x === 'string' && RELATION_NAME.test(x) && x.length <= 127;
    if (
      !valid(v['view']) ||
      !valid(v['source']) ||
      Object.keys(v).some((k) => k !== 'view' && k !== 'source')
    ) {
      throw new InvalidOptionError(
        `${where}.liveView`,
        "must be { view, source }: names of the form 'name' or 'schema.name' (lower-case letters, digits, _ and $)",
      );
    }
    if (v['view'] === v['source']) {
      throw new InvalidOptionError(`${where}.liveView`, 'view and source must name two relations');
    }
    if (sideEffects) {
      throw new InvalidOptionError(`${where}.liveView`, 'does not apply to a consumer with side effects');
    }
    view = { view: v['view'], source: v['source'] };
  }
  return { sideEffects, rebuildFrom, takeoverWithin, liveView: view };
}

function resolveLaneKey(value: unknown, where: string): LaneKey {
  if (value === undefined || value === 'streamId') return STREAM_KEY;
  if (typeof value === 'object' && value !== null) {
    const fields = Object.keys(value);
    const [from] = fields;
    const field = (value as Record<string, unknown>)[from ?? ''];
    if (
      fields.length === 1 &&
      (from === 'data' || from === 'metadata') &&
      typeof field === 'string' &&
      field !== '' &&
      Buffer.byteLength(field) <= 200 &&
      isStorableText(field)
    ) {
      return { from, field };
    }
  }
  throw new InvalidOptionError(
    where,
    "must be 'streamId', { data: '<field>' } or { metadata: '<field>' } (a field name of at most 200 bytes)",
  );
}

function resolveTypes(value: unknown, where: string): readonly string[] | null {
  if (value === undefined) return null;
  if (
    !Array.isArray(value) ||
    value.length === 0 ||
    value.some((t) => typeof t !== 'string' || t === '' || Buffer.byteLength(t) > 1000 || !isStorableText(t))
  ) {
    throw new InvalidOptionError(where, 'must be a non-empty array of event types (non-empty strings)');
  }
  return Object.freeze([...new Set(value as string[])]);
}

/**
 * One lane of `consumer` (a shared consumer): the row its lanes keep under `instanceId` ('*' for
 * one lane, '*k/N' for lane k of N). The lane count is the one its rows have in the database, which
 * may differ from the configured one while a change of lanes is in progress.
 */
export function laneOf(consumer: ResolvedConsumer, instanceId: string): ResolvedConsumer {
  const lane = parseLaneInstanceId(instanceId);
  if (lane === null) throw new Error(`${instanceId} is not a lane's instance id`);
  if (lane.count === 1)
    return consumer.lane?.count === 1 ? consumer : { ...consumer, instanceId, lane, unit: consumer.name };
  // A lane's fetch reads every event and keeps its own, about one in `count`: its batch counts the
  // events it reads, so that a turn still delivers about batchSize of its own.
  return {
    ...consumer,
    instanceId,
    lane,
    unit: `${consumer.name}\u0000${instanceId}`,
    batchSize: consumer.batchSize * lane.count,
    maxBatchSize: consumer.maxBatchSize * lane.count,
  };
}

/**
 * The attempts a failure counts as: every one of `consumer`'s attempts when its error policy says
 * the error is permanent (a predicate that throws says it is not), else `attempt`.
 */
export function attemptsCharged(
  consumer: ResolvedConsumer,
  attempt: number,
  error: unknown,
  event: EventRecord,
): number {
  let permanent = false;
  try {
    permanent = consumer.isPermanent(error, event) === true;
  } catch {
    permanent = false;
  }
  return permanent ? Math.max(attempt, consumer.maxAttempts) : attempt;
}

/**
 * What the dispatcher's options (DispatcherOptions), a consumer (Consumer) and its error policy
 * (ErrorPolicy) may say: written as records over their keys, so that a field added to one of the
 * types without being listed here fails the build.
 */
const DISPATCHER_FIELDS: ReadonlySet<string> = new Set(
  Object.keys({
    sql: true,
    consumers: true,
    schema: true,
    instanceId: true,
    batchSize: true,
    maxBatchSize: true,
    maxTurnMs: true,
    pollIntervalMs: true,
    maxAttempts: true,
    rearmCooldownMs: true,
    maxRearmCount: true,
    concurrency: true,
    listen: true,
    listenSql: true,
    listenCheckMs: true,
    handlerTimeoutMs: true,
    statementTimeoutMs: true,
    heartbeatIntervalMs: true,
    retryDelayMs: true,
    retryMaxDelayMs: true,
    backoffInitialMs: true,
    backoffMaxMs: true,
    countCrashedAttempts: true,
    isFeatureEnabled: true,
    logger: true,
    meterProvider: true,
    tracerProvider: true,
  } satisfies Record<keyof DispatcherOptions, true>),
);
const CONSUMER_FIELDS: ReadonlySet<string> = new Set(
  Object.keys({
    name: true,
    handler: true,
    batchHandler: true,
    errorPolicy: true,
    delivery: true,
    startFrom: true,
    ordering: true,
    transactional: true,
    featureName: true,
    handlerTimeoutMs: true,
    batchSize: true,
    maxBatchSize: true,
    lanes: true,
    laneKey: true,
    types: true,
    version: true,
    sideEffects: true,
    rebuild: true,
    liveView: true,
  } satisfies Record<keyof Consumer, true>),
);
const POLICY_FIELDS: ReadonlySet<string> = new Set(
  Object.keys({
    maxAttempts: true,
    skipApplyErrors: true,
    isPermanent: true,
    parkKey: true,
  } satisfies Record<keyof ErrorPolicy, true>),
);
const REBUILD_FIELDS: ReadonlySet<string> = new Set(
  Object.keys({ from: true, takeover: true } satisfies Record<keyof RebuildOptions, true>),
);

/**
 * Refuses a field `object` (a consumer, an error policy) does not know: a misspelt or misplaced
 * option would otherwise be ignored without a word (`maxAttempts` beside `handler` rather than in
 * `errorPolicy` retried an event for ever). Only for a plain object (a literal, a spread, JSON): an
 * instance of a class of the application's may hold fields of its own (a repository it was given).
 * @throws {InvalidOptionError} naming the field
 */
function refuseUnknownFields(
  object: Record<string, unknown>,
  known: ReadonlySet<string>,
  where: string,
  what: string,
): void {
  const prototype: unknown = Object.getPrototypeOf(object);
  if (prototype !== Object.prototype && prototype !== null) return;
  const field = Object.keys(object).find((k) => !known.has(k));
  if (field === undefined) return;
  const hint =
    where === ''
      ? ''
      : where.endsWith('errorPolicy')
        ? CONSUMER_FIELDS.has(field)
          ? ': it belongs to the consumer itself'
          : ''
        : POLICY_FIELDS.has(field)
          ? `: it belongs in errorPolicy ({ errorPolicy: { ${field}: … } })`
          : '';
  throw new InvalidOptionError(
    where === '' ? field : `${where}.${field}`,
    `is not an option of ${what}${hint}`,
  );
}

/**
 * The options object a public function was given: `{}` when it was left out (`undefined`, or `null`
 * as JavaScript and JSON callers write "nothing"). With `known`, a field of a plain object that is
 * none of `known.fields` is refused: a misspelt option (`{ schem: 'tenant' }`, `{ formMs: 5000 }`)
 * would otherwise be ignored, and the call would do something else than asked.
 * @throws {InvalidOptionError} when it is something other than an object, or has an unknown field
 */
export function optionsObject<T extends object>(
  value: T | null | undefined,
  known?: { readonly fields: readonly (keyof T & string)[]; readonly of: string },
): T {
  if (value === undefined || value === null) return {} as T;
  if (typeof value !== 'object') throw new InvalidOptionError('options', 'must be an object');
  if (known) refuseUnknownFields(value as Record<string, unknown>, new Set(known.fields), '', known.of);
  return value;
}

/**
 * `value` as a logger: an object with debug, info, warn and error methods.
 * @throws {InvalidOptionError} when it is not one
 */
export function requireLogger(value: unknown): Logger {
  const logger = value as Record<string, unknown> | null;
  if (
    (typeof logger !== 'object' && typeof logger !== 'function') ||
    logger === null ||
    !(['debug', 'info', 'warn', 'error'] as const).every((level) => typeof logger[level] === 'function')
  ) {
    throw new InvalidOptionError('logger', 'must have debug, info, warn and error methods (pino does)');
  }
  return value as Logger;
}

/**
 * `value` as a postgres.js pool (or transaction): the function its statements are made with.
 * @throws {InvalidOptionError} naming `option` when it is not one
 */
export function requirePool<T>(value: T, option = 'sql'): T {
  if (typeof value !== 'function') throw new InvalidOptionError(option, 'must be a postgres.js pool');
  return value;
}

/**
 * `value` as a name Sluice stores (a consumer, an instance, an actor): a non-empty string of at most
 * 200 UTF-8 bytes that PostgreSQL text stores unchanged.
 * @throws {InvalidOptionError} naming `option`
 */
export function checkStorableName(value: unknown, option: string): string {
  if (typeof value !== 'string' || value === '' || Buffer.byteLength(value) > 200 || !isStorableText(value)) {
    throw new InvalidOptionError(
      option,
      'must be a non-empty string of at most 200 bytes without NUL or lone UTF-16 surrogates',
    );
  }
  return value;
}

/**
 * Whether PostgreSQL text stores `value` unchanged: no NUL, and no lone UTF-16 surrogate (it has no
 * UTF-8 form and would be stored as U+FFFD, so two names could become one).
 */
function isStorableText(value: string): boolean {
  return !value.includes('\u0000') && !/\p{Cs}/u.test(value);
}

function oneOf<T extends string>(value: unknown, allowed: readonly T[], option: string): T {
  if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value)) {
    throw new InvalidOptionError(option, `must be one of ${allowed.map((a) => `'${a}'`).join(', ')}`);
  }
  return value as T;
}

function integer(value: unknown, option: string, min = 1, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) {
    throw new InvalidOptionError(option, `must be an integer of at least ${min}`);
  }
  if (value > max) throw new InvalidOptionError(option, `must be at most ${max}`);
  return value;
}

function boolean(option: string, value: unknown, fallback: boolean): boolean {
  // null as undefined, as for every other option: the default.
  if (value === undefined || value === null) return fallback;
  if (typeof value !== 'boolean') throw new InvalidOptionError(option, 'must be true or false');
  return value;
}

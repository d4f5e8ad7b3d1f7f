// JSON schemas of the ops routes, `as const`: params, query, bodies and responses (docs/design.md §8).
// Ids travel as decimal strings: JSON numbers lose precision above 2^53.

const idString = { type: 'string', pattern: '^[0-9]{1,19}$' } as const;
const nullable = <T extends object>(schema: T) => ({ anyOf: [schema, { type: 'null' }] }) as const;
const dateTime = { type: 'string', format: 'date-time' } as const;
const text = { type: 'string', maxLength: 1000 } as const;
const name = { type: 'string', minLength: 1, maxLength: 200 } as const;

export const nameParams = {
  type: 'object',
  properties: { name },
  required: ['name'],
  additionalProperties: false,
} as const;

const positiveId = { type: 'string', pattern: '^[1-9][0-9]{0,18}$' } as const;

export const eventParams = {
  type: 'object',
  properties: { name, eventId: positiveId },
  required: ['name', 'eventId'],
  additionalProperties: false,
} as const;

export const deadLetterParams = {
  type: 'object',
  properties: { name, id: positiveId },
  required: ['name', 'id'],
  additionalProperties: false,
} as const;

export const instanceQuery = {
  type: 'object',
  properties: { instance: name },
  additionalProperties: false,
} as const;

export const listQuery = {
  type: 'object',
  properties: { instance: name, limit: { type: 'integer', minimum: 1, maximum: 1000 } },
  additionalProperties: false,
} as const;

export const auditQuery = {
  type: 'object',
  properties: { consumer: name, limit: { type: 'integer', minimum: 1, maximum: 1000 } },
  additionalProperties: false,
} as const;

const actionFields = { instanceId: name, reason: text } as const;

export const restartBody = {
  type: 'object',
  properties: { from: { type: 'string', pattern: '^(beginning|now|[0-9]{1,19})$' }, ...actionFields },
  required: ['from'],
  additionalProperties: false,
} as const;

export const disableBody = {
  type: 'object',
  properties: {
    until: dateTime,
    forMs: { type: 'integer', minimum: 1000, maximum: 31_536_000_000 },
    ...actionFields,
  },
  additionalProperties: false,
} as const;

export const enableBody = { type: 'object', properties: actionFields, additionalProperties: false } as const;

export const eventBody = {
  type: 'object',
  properties: { eventId: { type: 'string', pattern: '^[1-9][0-9]{0,18}$' }, ...actionFields },
  required: ['eventId'],
  additionalProperties: false,
} as const;

export const replayBody = {
  type: 'object',
  properties: {
    ids: {
      type: 'array',
      items: { type: 'string', pattern: '^[1-9][0-9]{0,18}$' },
      minItems: 1,
      maxItems: 1000,
    },
    limit: { type: 'integer', minimum: 1, maximum: 1000 },
    dryRun: { type: 'boolean' },
    ...actionFields,
  },
  additionalProperties: false,
} as const;

/** A parked key (a stream id, or the consumer's laneKey field): any text, '' included (a missing field). */
const parkedKeyText = { type: 'string', maxLength: 1000 } as const;

export const parkedKeysQuery = {
  type: 'object',
  properties: { limit: { type: 'integer', minimum: 1, maximum: 1000 } },
  additionalProperties: false,
} as const;

// The key travels in the query, not the path: keys can hold '/' (and any other character).
export const parkedEventsQuery = {
  type: 'object',
  properties: { key: parkedKeyText, limit: { type: 'integer', minimum: 1, maximum: 1000 } },
  required: ['key'],
  additionalProperties: false,
} as const;

export const parkedKeyBody = {
  type: 'object',
  properties: { key: parkedKeyText, reason: text },
  required: ['key'],
  additionalProperties: false,
} as const;

export const relaneBody = {
  type: 'object',
  properties: { lanes: { type: 'integer', minimum: 1, maximum: 1024 }, reason: text },
  required: ['lanes'],
  additionalProperties: false,
} as const;

export const errorResponse = {
  type: 'object',
  properties: {
    statusCode: { type: 'integer' },
    code: { type: 'string' },
    error: { type: 'string' },
    message: { type: 'string' },
  },
  required: ['statusCode', 'code', 'message'],
} as const;

const summaryProperties = {
  name: { type: 'string' },
  instanceId: { type: 'string' },
  status: { type: 'string', enum: ['idle', 'processing', 'dead', 'disabled'] },
  cursor: idString,
  head: idString,
  lagEvents: idString,
  lagSeconds: nullable({ type: 'number' }),
  pendingGaps: { type: 'integer' },
  oldestGapAgeSeconds: nullable({ type: 'number' }),
  attempts: { type: 'integer' },
  stuckEventId: nullable(idString),
  lastError: nullable({ type: 'string' }),
  lastErrorAt: nullable(dateTime),
  lastErrorResolvedAt: nullable(dateTime),
  lastErrorResolvedBy: nullable({ type: 'string' }),
  failureCategory: nullable({ type: 'string' }),
  rearmCount: { type: 'integer' },
  disabledUntil: nullable(dateTime),
  disabledReason: nullable({ type: 'string' }),
  lastSeenAt: nullable(dateTime),
  lastProgressAt: nullable(dateTime),
  updatedAt: dateTime,
  deadLetters: { type: 'integer' },
  /** The row as a lane of its consumer (docs/design.md §11): null for a per-instance row. */
  lane: nullable({
    type: 'object',
    properties: { index: { type: 'integer' }, count: { type: 'integer' } },
    required: ['index', 'count'],
  }),
  parkedKeys: { type: 'integer' },
  laneChange: nullable({
    type: 'object',
    properties: {
      from: { type: 'integer' },
      to: { type: 'integer' },
      barrier: idString,
      switched: { type: 'boolean' },
    },
    required: ['from', 'to', 'barrier', 'switched'],
  }),
} as const;

const summaryRequired = [
  'name',
  'instanceId',
  'status',
  'cursor',
  'head',
  'lagEvents',
  'pendingGaps',
  'attempts',
] as const;

/** One lane's row, inside a laned consumer summed up. */
const laneSummary = { type: 'object', properties: summaryProperties, required: summaryRequired } as const;

/** A cursor row; a laned consumer shown as a whole (`instanceId: '*'`) sums its lanes up, each in `lanes`. */
export const consumerSummary = {
  type: 'object',
  properties: { ...summaryProperties, lanes: { type: 'array', items: laneSummary } },
  required: summaryRequired,
} as const;

const gapRange = {
  type: 'object',
  properties: { from: idString, to: idString, fence: nullable(idString), observedAt: dateTime },
  required: ['from', 'to'],
} as const;

export const consumerDetail = {
  type: 'object',
  properties: { ...consumerSummary.properties, gaps: { type: 'array', items: gapRange } },
  required: consumerSummary.required,
} as const;

const backend = {
  type: 'object',
  properties: {
    pid: nullable({ type: 'integer' }),
    database: nullable({ type: 'string' }),
    applicationName: nullable({ type: 'string' }),
    state: nullable({ type: 'string' }),
    xactStart: nullable(dateTime),
    xid: nullable(idString),
    preparedGid: nullable({ type: 'string' }),
  },
} as const;

const diagnosisProperties = {
  consumer: consumerSummary,
  findings: { type: 'array', items: { type: 'string' } },
  oldestGap: nullable({
    type: 'object',
    properties: {
      ...gapRange.properties,
      ageSeconds: { type: 'number' },
      heldBy: { type: 'array', items: backend },
    },
  }),
  rowLockedBy: nullable(backend),
  nextRearmAt: nullable(dateTime),
} as const;

/** Why a consumer is (not) moving; a laned consumer's sums its lanes up, each lane's in `lanes`. */
export const diagnosis = {
  type: 'object',
  properties: {
    ...diagnosisProperties,
    lanes: {
      type: 'array',
      items: { type: 'object', properties: diagnosisProperties, required: ['consumer', 'findings'] },
    },
  },
  required: ['consumer', 'findings'],
} as const;

const actionProperties = {
  consumer: { type: 'string' },
  instanceId: { type: 'string' },
  action: { type: 'string' },
  cursorBefore: idString,
  cursorAfter: idString,
  statusBefore: { type: 'string' },
  statusAfter: { type: 'string' },
  eventId: idString,
  /** disable: when it re-enables by itself, by the database's clock (null: never). */
  until: nullable(dateTime),
} as const;

const actionRequired = ['consumer', 'instanceId', 'action', 'cursorBefore', 'cursorAfter'] as const;

/**
 * What an action did. On a laned consumer as a whole (restart, disable, enable, fence) it acted on
 * every lane: `instanceId` is '*', the other fields are the first lane's, and `lanes` has each one's.
 */
export const actionResult = {
  type: 'object',
  properties: {
    ...actionProperties,
    lanes: {
      type: 'array',
      items: { type: 'object', properties: actionProperties, required: actionRequired },
    },
  },
  required: actionRequired,
} as const;

export const replayResult = {
  type: 'object',
  properties: {
    consumer: { type: 'string' },
    instanceId: { type: 'string' },
    dryRun: { type: 'boolean' },
    count: { type: 'integer' },
    deadLetterIds: { type: 'array', items: idString },
  },
  required: ['consumer', 'instanceId', 'dryRun', 'count', 'deadLetterIds'],
} as const;

export const deadLetter = {
  type: 'object',
  properties: {
    id: idString,
    consumer: { type: 'string' },
    instanceId: { type: 'string' },
    eventId: idString,
    streamId: { type: 'string' },
    type: { type: 'string' },
    data: {},
    metadata: {},
    eventCreatedAt: dateTime,
    reason: { type: 'string' },
    error: nullable({ type: 'string' }),
    attempts: { type: 'integer' },
    createdAt: dateTime,
    replayRequestedAt: nullable(dateTime),
    replayedAt: nullable(dateTime),
  },
  required: ['id', 'eventId', 'type', 'reason'],
} as const;

export const consumerEvent = {
  type: 'object',
  properties: {
    consumer: { type: 'string' },
    instanceId: { type: 'string' },
    id: idString,
    streamId: { type: 'string' },
    type: { type: 'string' },
    data: {},
    metadata: {},
    createdAt: dateTime,
    stuck: { type: 'boolean' },
  },
  required: ['consumer', 'instanceId', 'id', 'streamId', 'type', 'createdAt', 'stuck'],
} as const;

export const parkedKey = {
  type: 'object',
  properties: {
    key: { type: 'string' },
    firstEventId: idString,
    error: nullable({ type: 'string' }),
    attempts: { type: 'integer' },
    parkedAt: dateTime,
    events: { type: 'integer' },
    replayRequestedAt: nullable(dateTime),
  },
  required: ['key', 'firstEventId', 'events', 'parkedAt'],
} as const;

/** An event set aside under a parked key; `data` and `metadata` through `ops.redact`. */
export const parkedEvent = {
  type: 'object',
  properties: {
    key: { type: 'string' },
    eventId: idString,
    streamId: { type: 'string' },
    type: { type: 'string' },
    data: {},
    metadata: {},
    eventCreatedAt: dateTime,
    parkedAt: dateTime,
    error: nullable({ type: 'string' }),
  },
  required: ['key', 'eventId', 'streamId', 'type'],
} as const;

export const parkedKeyResult = {
  type: 'object',
  properties: {
    consumer: { type: 'string' },
    key: { type: 'string' },
    action: { type: 'string' },
    events: { type: 'integer' },
    /** The lane that owns the key: '*', or '*k/N'. */
    lane: { type: 'string' },
  },
  required: ['consumer', 'key', 'action', 'events', 'lane'],
} as const;

export const relaneResult = {
  type: 'object',
  properties: {
    consumer: { type: 'string' },
    from: { type: 'integer' },
    to: { type: 'integer' },
    outcome: { type: 'string', enum: ['started', 'retargeted', 'cancelled', 'unchanged'] },
    barrier: nullable(idString),
  },
  required: ['consumer', 'from', 'to', 'outcome', 'barrier'],
} as const;

export const auditRecord = {
  type: 'object',
  properties: {
    id: idString,
    at: dateTime,
    actor: { type: 'string' },
    action: { type: 'string' },
    consumer: nullable({ type: 'string' }),
    instanceId: nullable({ type: 'string' }),
    cursorBefore: nullable(idString),
    cursorAfter: nullable(idString),
    details: { type: 'object', additionalProperties: true },
  },
  required: ['id', 'at', 'actor', 'action'],
} as const;

export const health = {
  type: 'object',
  properties: {
    status: { type: 'string', enum: ['ok', 'degraded', 'down'] },
    running: { type: 'boolean' },
    listenConnected: { type: 'boolean' },
    deadConsumers: { type: 'array', items: { type: 'string' } },
    stagnatingConsumers: { type: 'array', items: { type: 'string' } },
    maxLagEvents: idString,
    message: { type: 'string' },
  },
  required: ['status', 'running'],
} as const;

/** Responses every route may give besides its success body. */
export const errorResponses = {
  400: errorResponse,
  401: errorResponse,
  404: errorResponse,
  405: errorResponse,
  409: errorResponse,
} as const;

const versionState = {
  type: 'string',
  enum: ['rebuilding', 'paused', 'waiting', 'taking-over', 'live', 'retired', 'abandoned', 'dropped'],
} as const;
const version = { type: 'integer', minimum: 1, maximum: 2147483647 } as const;

export const versionParams = {
  type: 'object',
  properties: { name, version: { type: 'string', pattern: '^[1-9][0-9]{0,9}$' } },
  required: ['name', 'version'],
  additionalProperties: false,
} as const;

export const rebuildBody = {
  type: 'object',
  properties: { version, reason: text },
  additionalProperties: false,
} as const;

export const approveBody = {
  type: 'object',
  properties: { version, reason: text, force: { type: 'boolean' } },
  additionalProperties: false,
} as const;

export const dropVersionBody = {
  type: 'object',
  properties: { dropSource: { type: 'boolean' }, reason: text },
  additionalProperties: false,
} as const;

export const versionChange = {
  type: 'object',
  properties: {
    consumer: { type: 'string' },
    version: { type: 'integer' },
    state: versionState,
    barrier: nullable(idString),
  },
  required: ['consumer', 'version', 'state', 'barrier'],
} as const;

export const droppedVersion = {
  type: 'object',
  properties: {
    consumer: { type: 'string' },
    version: { type: 'integer' },
    rows: { type: 'integer' },
    dropped: nullable({ type: 'string' }),
  },
  required: ['consumer', 'version', 'rows', 'dropped'],
} as const;

const versionRow = {
  type: 'object',
  properties: {
    consumerName: { type: 'string' },
    version: { type: 'integer' },
    state: versionState,
    rowName: { type: 'string' },
    sideEffects: { type: 'boolean' },
    startPosition: idString,
    takeoverWithin: nullable(idString),
    barrier: nullable(idString),
    viewName: nullable({ type: 'string' }),
    viewSource: nullable({ type: 'string' }),
    changedBy: nullable({ type: 'string' }),
    createdAt: dateTime,
    stateChangedAt: dateTime,
  },
  required: ['consumerName', 'version', 'state', 'rowName', 'sideEffects', 'startPosition', 'createdAt'],
} as const;

const rebuildProgressSchema = {
  type: 'object',
  properties: {
    consumer: { type: 'string' },
    liveVersion: nullable({ type: 'integer' }),
    version: { type: 'integer' },
    state: versionState,
    sideEffects: { type: 'boolean' },
    position: nullable(idString),
    startPosition: idString,
    head: idString,
    lagEvents: nullable(idString),
    ratePerSecond: nullable({ type: 'number' }),
    etaSeconds: nullable({ type: 'number' }),
    progress: nullable({ type: 'number' }),
    barrier: nullable(idString),
    takeoverWithin: nullable(idString),
    startedAt: dateTime,
    stateChangedAt: dateTime,
  },
  required: ['consumer', 'version', 'state', 'head', 'startedAt'],
} as const;

export const rebuildStatusSchema = {
  type: 'object',
  properties: {
    consumer: { type: 'string' },
    versions: { type: 'array', items: versionRow },
    rebuild: nullable(rebuildProgressSchema),
  },
  required: ['consumer', 'versions', 'rebuild'],
} as const;

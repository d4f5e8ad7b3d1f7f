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

export const consumerSummary = {
  type: 'object',
  properties: {
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
  },
  required: ['name', 'instanceId', 'status', 'cursor', 'head', 'lagEvents', 'pendingGaps', 'attempts'],
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

export const diagnosis = {
  type: 'object',
  properties: {
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
  },
  required: ['consumer', 'findings'],
} as const;

export const actionResult = {
  type: 'object',
  properties: {
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
  },
  required: ['consumer', 'instanceId', 'action', 'cursorBefore', 'cursorAfter'],
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

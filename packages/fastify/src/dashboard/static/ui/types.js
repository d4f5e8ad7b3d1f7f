// @ts-check
// The shapes of what the ops routes answer (the JSON schemas in src/schemas.ts), for the type
// checker only: this module has no code, and importing a type from it loads nothing in the browser.

/** @typedef {'idle' | 'processing' | 'dead' | 'disabled'} ConsumerStatus */

/**
 * One cursor row (`GET consumers`). Ids and cursors are decimal strings: they are bigints.
 * @typedef {object} ConsumerSummary
 * @property {string} name
 * @property {string} instanceId '*' for a shared consumer
 * @property {ConsumerStatus} status
 * @property {string} cursor
 * @property {string} head
 * @property {string} lagEvents
 * @property {number | null} [lagSeconds]
 * @property {number} pendingGaps
 * @property {number | null} [oldestGapAgeSeconds]
 * @property {number} attempts
 * @property {string | null} [stuckEventId]
 * @property {string | null} [lastError]
 * @property {string | null} [lastErrorAt]
 * @property {string | null} [lastErrorResolvedAt] set when the last error is past (see policy.js)
 * @property {string | null} [lastErrorResolvedBy] the operator action that resolved it, `skip by alice`
 * @property {string | null} [failureCategory]
 * @property {number} [rearmCount]
 * @property {string | null} [disabledUntil]
 * @property {string | null} [disabledReason]
 * @property {string | null} [lastSeenAt]
 * @property {string | null} [lastProgressAt]
 * @property {number} [deadLetters]
 * @property {Lane | null} [lane] the row as a lane of its consumer (`*k/N`); null for a per-instance row
 * @property {number} [parkedKeys] keys the consumer has parked (its whole: every lane row says the same)
 * @property {LaneChange | null} [laneChange] a change of the consumer's lane count in progress
 * @property {ConsumerSummary[]} [lanes] a laned consumer shown as a whole: each lane's row
 */

/**
 * Where a row sits among its consumer's lanes: lane `index` (0 … count − 1) of `count`.
 * @typedef {object} Lane
 * @property {number} index
 * @property {number} count
 */

/**
 * A change of a consumer's lane count: the old lanes deliver up to `barrier`, the new ones from it.
 * @typedef {object} LaneChange
 * @property {number} from
 * @property {number} to
 * @property {string} barrier
 * @property {boolean} switched the new lanes exist; the old ones finish their pending gaps
 */

/**
 * @typedef {object} GapRange
 * @property {string} from
 * @property {string} to
 * @property {string | null} [fence]
 * @property {string} [observedAt]
 */

/** @typedef {ConsumerSummary & { gaps?: GapRange[] }} ConsumerDetail */

/**
 * A database backend (or prepared transaction) that holds a gap open or a consumer's row.
 * @typedef {object} Backend
 * @property {number | null} [pid]
 * @property {string | null} [database]
 * @property {string | null} [applicationName]
 * @property {string | null} [state]
 * @property {string | null} [xactStart]
 * @property {string | null} [xid]
 * @property {string | null} [preparedGid]
 */

/**
 * @typedef {object} Diagnosis
 * @property {ConsumerSummary} consumer
 * @property {string[]} findings
 * @property {(GapRange & { ageSeconds?: number, heldBy?: Backend[] }) | null} [oldestGap]
 * @property {Backend | null} [rowLockedBy]
 * @property {string | null} [nextRearmAt]
 */

/**
 * A dead letter (`GET consumers/:name/dead-letters[/:id]`); data and metadata as `ops.redact` left them.
 * @typedef {object} DeadLetter
 * @property {string} id
 * @property {string} [consumer]
 * @property {string} [instanceId]
 * @property {string} eventId
 * @property {string} [streamId]
 * @property {string} type
 * @property {unknown} [data]
 * @property {unknown} [metadata]
 * @property {string} [eventCreatedAt]
 * @property {string} reason
 * @property {string | null} [error]
 * @property {number} [attempts]
 * @property {string} [createdAt]
 * @property {string | null} [replayRequestedAt]
 * @property {string | null} [replayedAt]
 */

/**
 * One event of the log as a consumer sees it (`GET consumers/:name/events/:eventId`).
 * @typedef {object} ConsumerEvent
 * @property {string} consumer
 * @property {string} instanceId
 * @property {string} id
 * @property {string} streamId
 * @property {string} type
 * @property {unknown} [data]
 * @property {unknown} [metadata]
 * @property {string} createdAt
 * @property {boolean} stuck
 */

/**
 * What an accepted operator action did.
 * @typedef {object} ActionResult
 * @property {string} consumer
 * @property {string} instanceId
 * @property {string} action
 * @property {string} cursorBefore
 * @property {string} cursorAfter
 * @property {string} [statusBefore]
 * @property {string} [statusAfter]
 * @property {string} [eventId]
 * @property {string | null} [until]
 * @property {ActionResult[]} [lanes] an action on a laned consumer as a whole: what it did to each lane
 */

/**
 * @typedef {object} ReplayResult
 * @property {boolean} dryRun
 * @property {number} count
 * @property {string[]} deadLetterIds
 */

/**
 * A key the consumer parked (`GET consumers/:name/parked-keys`).
 * @typedef {object} ParkedKey
 * @property {string} key
 * @property {string} firstEventId the event whose failure parked it
 * @property {string | null} [error]
 * @property {number} [attempts]
 * @property {string} parkedAt
 * @property {number} events its events set aside, the first one included
 * @property {string | null} [replayRequestedAt] a replay asked for and not done yet
 */

/**
 * An event set aside under a parked key (`GET consumers/:name/parked-keys/events?key=`); data and
 * metadata as `ops.redact` left them.
 * @typedef {object} ParkedEvent
 * @property {string} key
 * @property {string} eventId
 * @property {string} streamId
 * @property {string} type
 * @property {unknown} [data]
 * @property {unknown} [metadata]
 * @property {string} [eventCreatedAt]
 * @property {string} [parkedAt]
 * @property {string | null} [error] the failure that parked the key, on its first event
 */

/**
 * What a replay or a drop of a parked key did.
 * @typedef {object} ParkedKeyResult
 * @property {string} consumer
 * @property {string} key
 * @property {string} action
 * @property {number} events
 * @property {string} lane the lane that owns the key: '*' or '*k/N'
 */

/** A consumer row's identity: a shared row has the instance id '*'. */
/** @typedef {{ name: string, instanceId: string }} ConsumerKey */

export {};

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

/**
 * A version's state (docs/design.md §12): on its way (`rebuilding`, `paused`, `waiting` for a
 * version with side effects, `taking-over`), `live`, or done with (`retired`, `abandoned`, `dropped`).
 * @typedef {'rebuilding' | 'paused' | 'waiting' | 'taking-over' | 'live' | 'retired' | 'abandoned' | 'dropped'} VersionState
 */

/**
 * One version of a versioned consumer (`GET rebuilds`).
 * @typedef {object} VersionRow
 * @property {string} consumerName
 * @property {number} version
 * @property {VersionState} state
 * @property {string} rowName its consumer rows' name: the consumer's for version 1, `<name>@v<N>` else
 * @property {boolean} sideEffects
 * @property {string} startPosition
 * @property {string | null} [takeoverWithin]
 * @property {string | null} [barrier]
 * @property {string | null} [changedBy]
 * @property {string} createdAt
 * @property {string} [stateChangedAt]
 */

/**
 * The version of a consumer on its way to take over, with how far it has come (`GET rebuilds`).
 * @typedef {object} RebuildProgress
 * @property {string} consumer
 * @property {number | null} [liveVersion]
 * @property {number} version
 * @property {VersionState} state
 * @property {boolean} [sideEffects] it takes the rows over where the live version is: no rebuild
 * @property {string | null} [position] the lowest cursor of its rows; null with side effects
 * @property {string} [startPosition]
 * @property {string} head
 * @property {string | null} [lagEvents]
 * @property {number | null} [ratePerSecond] events per second since it started
 * @property {number | null} [etaSeconds] the time left at that rate (null while paused)
 * @property {number | null} [progress] from its start position to the head: 0 … 1
 * @property {string | null} [barrier] where the live version stopped (taking over)
 * @property {string | null} [takeoverWithin] it takes over by itself within this many events of the head
 * @property {string} startedAt
 * @property {string} [stateChangedAt]
 */

/**
 * A versioned consumer: its versions, and the one on its way with its progress (null when none is).
 * @typedef {object} RebuildStatus
 * @property {string} consumer
 * @property {VersionRow[]} versions
 * @property {RebuildProgress | null} rebuild
 */

/**
 * What an operator action on a rebuild did (approve, pause, resume, abandon).
 * @typedef {object} VersionChange
 * @property {string} consumer
 * @property {number} version
 * @property {VersionState} state the version's state after it
 * @property {string | null} barrier
 */

/** A consumer row's identity: a shared row has the instance id '*'. */
/** @typedef {{ name: string, instanceId: string }} ConsumerKey */

export {};

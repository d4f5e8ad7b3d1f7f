// The systems each scenario compares, by the names the table and RESULTS.md show.

/** Lanes of the catch-up row that runs the 1-consumer backlog as one consumer of many lanes. */
export const CATCH_UP_LANES = 32;

export const CATCH_UP_SYSTEMS = {
  raw: 'raw scan',
  minimal: 'minimal loop',
  sluice: 'Sluice',
  sluiceNoCrash: 'Sluice, countCrashedAttempts: false',
  sluiceOneSlot: 'Sluice, concurrency 1 (no read-ahead)',
  sluiceLanes: `Sluice, ${CATCH_UP_LANES} lanes (concurrency ${CATCH_UP_LANES})`,
  minimalWriting: 'minimal loop writing the rows and its cursor in one transaction per batch',
  sluiceTransactional: 'Sluice, transactional consumer writing each row through ctx.tx',
  emmett: 'Emmett',
  graphile: 'graphile-worker',
} as const;

/** The catch-up case of one consumer writing one row per event into a projection table. */
export const PROJECTION_CASE = '1 consumer, one row per event';

/** The slow-handler scenario's cases: how many handler calls may run at once. */
export function slowHandlerCase(concurrency: number): string {
  return `${concurrency} at once`;
}

export const SLOW_HANDLER_SYSTEMS = {
  sluice: (lanes: number) => `Sluice, ${lanes} lane${lanes === 1 ? '' : 's'}`,
  graphile: 'graphile-worker',
} as const;

export const LATENCY_SYSTEMS = {
  otherProcess: 'Sluice, transaction() with the dispatcher in another process (after-commit NOTIFY)',
  otherProcessInTx:
    "Sluice, append(…, { wakeUp: 'in-transaction' }) with the dispatcher in another process (NOTIFY in the appending transaction)",
  otherPool: 'Sluice, transaction() from another pool of the same process (after-commit NOTIFY)',
  otherPoolTimed: 'Sluice, from another pool, each statement timed (diagnostic: slower, see below)',
  inProcess: 'Sluice, transaction() on the dispatcher pool (in-process wake-up)',
  polling: 'Sluice, polling only (listen: false, wakeUp: none)',
  minimal: 'minimal loop woken by LISTEN (in-transaction NOTIFY)',
  graphile: 'graphile-worker',
  emmett: 'Emmett',
} as const;

export const APPEND_SYSTEMS = {
  bare: 'bare insert',
  none: "Sluice append(), wakeUp: 'none'",
  auto: 'Sluice transaction() + append() (after-commit NOTIFY)',
  inTx: "Sluice append(), wakeUp: 'in-transaction'",
} as const;

export const IDLE_SYSTEMS = {
  sluice: 'Sluice',
  minimal: 'minimal loop (each consumer polls every 100 ms)',
  floor: 'floor: select 1 every poll tick',
} as const;

/**
 * The rebuild scenario's rows: version 1 serving without a rebuild, and during the rebuild of
 * version 2 in a process of its own (declaring only version 2) or in the serving process (declaring
 * both), and each rebuild.
 */
export const REBUILD_SYSTEMS = {
  alone: 'Sluice, version 1 serving alone (no rebuild)',
  duringSeparate: 'Sluice, version 1 serving while version 2 rebuilds in a process of its own',
  rebuildSeparate: 'Sluice, version 2 rebuilt in a process of its own, then taking over',
  during: "Sluice, version 1 serving while version 2 rebuilds in the serving version's process",
  rebuild: "Sluice, version 2 rebuilt in the serving version's process, then taking over",
} as const;

// pg_snapshot arithmetic for the gap watch (docs/design.md §5.5). Pure functions over parsed snapshots.
//
// Why a watch list: with the horizon held (a transaction left open anywhere in the cluster),
// ranges cannot burn and pile up under rollback-heavy load. Re-fetching all of them every turn
// would make a turn's cost grow with their number. A range can only gain a visible id when a
// transaction with an xid below its fence ends, so each turn records the transactions that were
// still running below the highest fence ("watch"). The next turn re-fetches only ranges fenced
// above the lowest watched xid that has ended since, plus unfenced and burnable ones; the idle
// pre-check skips the consumer while every watched xid is still running.

import { compare } from './gaps.js';

export interface Snapshot {
  readonly xmin: bigint;
  readonly xmax: bigint;
  /** In-progress xids in [xmin, xmax), ascending. */
  readonly xip: readonly bigint[];
}

/** Parses pg_snapshot's text form `xmin:xmax:xip,xip,…`. */
export function parseSnapshot(text: string): Snapshot {
  const [xmin, xmax, xip = ''] = text.split(':');
  if (xmin === undefined || xmax === undefined) throw new Error(`not a pg_snapshot: ${text}`);
  return {
    xmin: BigInt(xmin),
    xmax: BigInt(xmax),
    xip:
      xip === ''
        ? []
        : xip
            .split(',')
            .map((x) => BigInt(x))
            .sort(compare),
  };
}

/** Whether `xid` (already allocated) was still running when the snapshot was taken. */
export function isRunning(snapshot: Snapshot, xid: bigint): boolean {
  if (xid < snapshot.xmin) return false;
  // xmax is one past the latest *completed* xid; an allocated xid at or above it has not completed.
  if (xid >= snapshot.xmax) return true;
  return snapshot.xip.includes(xid);
}

/**
 * The xids below `fence` that were running at `snapshot`. Everything in [xmax, fence) is running:
 * `fence` was allocated, so every xid below it was too, and none of those at or above xmax had
 * completed. (Bounded by the number of open transactions.)
 */
export function runningBelow(snapshot: Snapshot, fence: bigint): bigint[] {
  const running = snapshot.xip.filter((xid) => xid < fence);
  for (let xid = snapshot.xmax; xid < fence; xid++) running.push(xid);
  return running;
}

/** The lowest watched xid that is no longer running at `snapshot`, or null when all still run. */
export function lowestEnded(watch: readonly bigint[], snapshot: Snapshot): bigint | null {
  let lowest: bigint | null = null;
  for (const xid of watch) {
    if (!isRunning(snapshot, xid) && (lowest === null || xid < lowest)) lowest = xid;
  }
  return lowest;
}

/** Parses the comma-separated xid list the queries return for gap_watch. */
export function parseXidList(text: string | null): bigint[] {
  return text === null || text === '' ? [] : text.split(',').map((x) => BigInt(x));
}

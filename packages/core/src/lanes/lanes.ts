// Keyed lanes (docs/design.md §11): which consumer rows a lane is kept under, and how an event's
// key picks its lane. Pure: the hashing itself runs in SQL (queries/events.ts), where the fetch
// filters the log, with PostgreSQL's hashtextextended(), which hash partitioning keeps stable
// across releases and platforms.

/** The instance id of a shared consumer's rows: '*' for one lane, '*k/N' for lane k of N. */
export const SHARED_PREFIX = '*';

/** Most lanes a consumer may run as. */
export const MAX_LANES = 1024;

/** Where a lane sits among its consumer's lanes. */
export interface Lane {
  /** 0 … count − 1 */
  readonly index: number;
  readonly count: number;
}

/** What an event is keyed by: its stream id (the default), or one field of its data or metadata. */
export type LaneKey =
  | { readonly from: 'streamId' }
  | { readonly from: 'data'; readonly field: string }
  | { readonly from: 'metadata'; readonly field: string };

export const STREAM_KEY: LaneKey = Object.freeze({ from: 'streamId' });

/** How a key is recorded with a consumer's rows (consumers.lane_key): 'streamId', 'data:<field>', 'metadata:<field>'. */
export function laneKeyText(key: LaneKey): string {
  return key.from === 'streamId' ? 'streamId' : `${key.from}:${key.field}`;
}

/**
 * Whether another deployment recorded another lane key than `declared` with a shared consumer's
 * rows (docs/design.md §11.1). A row with no key recorded (an earlier release's) takes the next
 * start's.
 */
export function isAnotherKey(declared: LaneKey, recorded: string | null): boolean {
  return recorded !== null && recorded !== laneKeyText(declared);
}

/**
 * Whether a shared consumer's row is kept by another lane key than `declared` where that matters
 * (isAnotherKey): a lane of several, or a row in a change of lane count, splits the log by the
 * recorded key; parked keys were computed under it (docs/design.md §11.4), so one lane matters too
 * while keys are parked (`parkedKeys`, known once the row is held): its turns would look them up
 * under a key they were not parked by. Otherwise one lane's cursor means the same under any key
 * (such a process parks no key itself: see turn.ts).
 */
export function keptByAnotherKey(
  declared: LaneKey,
  row: {
    readonly instanceId: string;
    readonly laneKey: string | null;
    readonly changing: boolean;
    readonly parkedKeys: boolean;
  },
): boolean {
  if (!isAnotherKey(declared, row.laneKey)) return false;
  return row.changing || row.parkedKeys || (parseLaneInstanceId(row.instanceId)?.count ?? 1) > 1;
}

/** The key as a consumer declares it (for messages). */
export function laneKeyOption(text: string): string {
  const colon = text.indexOf(':');
  return colon === -1 ? `'${text}'` : `{ ${text.slice(0, colon)}: ${JSON.stringify(text.slice(colon + 1))} }`;
}

/** The instance id lane `index` of `count` keeps its row under. */
export function laneInstanceId(index: number, count: number): string {
  return count === 1 ? SHARED_PREFIX : `${SHARED_PREFIX}${index}/${count}`;
}

/** Every instance id of a consumer run as `count` lanes, in lane order. */
export function laneInstanceIds(count: number): string[] {
  return Array.from({ length: count }, (_, index) => laneInstanceId(index, count));
}

const LANE_ID = /^\*(0|[1-9]\d{0,3})\/([1-9]\d{0,3})$/;

/**
 * The lane a shared row's instance id names ('*' is lane 0 of 1), or null for any other instance
 * id (a per-instance row).
 */
export function parseLaneInstanceId(instanceId: string): Lane | null {
  if (instanceId === SHARED_PREFIX) return { index: 0, count: 1 };
  const match = LANE_ID.exec(instanceId);
  if (!match) return null;
  const index = Number(match[1]);
  const count = Number(match[2]);
  return count >= 2 && count <= MAX_LANES && index < count ? { index, count } : null;
}

/** Whether an instance id is one of the shared family ('*' or a lane): not a process's own. */
export function isSharedInstanceId(instanceId: string): boolean {
  return instanceId.startsWith(SHARED_PREFIX);
}

/** The key's value of an event, as the SQL of the fetch computes it (a missing field is ''). */
export function keyOf(
  key: LaneKey,
  event: { readonly streamId: string; readonly data: object; readonly metadata: object },
): string {
  if (key.from === 'streamId') return event.streamId;
  const source = (key.from === 'data' ? event.data : event.metadata) as Record<string, unknown>;
  const value = source[key.field];
  if (value === undefined || value === null) return '';
  // ->> gives a string as is and anything else as its JSON text.
  return typeof value === 'string' ? value : JSON.stringify(value);
}

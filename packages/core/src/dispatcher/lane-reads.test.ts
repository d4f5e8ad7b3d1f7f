import { expect, test } from 'vitest';
import { PASSED_TYPE, type EventRecord } from '../events.js';
import type { FetchFilter } from '../queries/events.js';
import { STREAM_KEY } from '../lanes/lanes.js';
import { laneBatchOf, LaneReads, type GroupBatch } from './lane-reads.js';

/** Events `from` … `from + count − 1`; event n is of lane n % 2 and of type 'A' when n % 3 is 0. */
function groupOf(from: number, count: number, xmin = 7n): GroupBatch {
  const ids = Array.from({ length: count }, (_, i) => from + i);
  return {
    events: ids.map((n): EventRecord => ({
      id: BigInt(n),
      streamId: `s-${n}`,
      type: n % 3 === 0 ? 'A' : 'B',
      data: {},
      metadata: {},
      createdAt: new Date(0),
    })),
    lanes: Int16Array.from(ids, (n) => n % 2),
    xmin,
    snapshots: [{ xmin, xmax: xmin, xip: [] }],
    head: BigInt(from + count + 100),
  };
}

function withoutId(group: GroupBatch, id: number): GroupBatch {
  const keep = group.events.map((e) => e.id !== BigInt(id));
  return {
    ...group,
    events: group.events.filter((_, i) => keep[i]),
    lanes: group.lanes.filter((_, i) => keep[i]),
  };
}

const lane = (laneIndex: number, keptLimit: number, types: string[] | null = null): FetchFilter => ({
  consumer: 'c',
  laneIndex,
  laneCount: 2,
  key: STREAM_KEY,
  types,
  parking: false,
  cap: null,
  keptLimit,
});

const ids = (events: readonly EventRecord[]) => events.map((e) => Number(e.id));
const own = (events: readonly EventRecord[]) => ids(events.filter((e) => e.type !== PASSED_TYPE));

test('a lane takes what follows its cursor in a batch without a hole, full or not', async () => {
  const reads = new LaneReads(8, 60_000);
  reads.offer('g', 10n, 100, Promise.resolve(groupOf(11, 20)));
  const taken = await reads.take('g', 15n, 1_000, 1_000);
  expect(taken?.map((s) => [s.start, s.full])).toEqual([[5, false]]);
  expect(await reads.take('g', 30n, 1_000, 1_000)).toBeUndefined(); // its last id: nothing follows
  expect(await reads.take('g', 9n, 1_000, 1_000)).toBeUndefined(); // below it
});

test('a batch with a hole (at its start or inside) is never taken', async () => {
  const reads = new LaneReads(8, 60_000);
  reads.offer('g', 10n, 10, Promise.resolve(groupOf(12, 10)));
  expect(await reads.take('g', 10n, 1_000, 1_000)).toBeUndefined();
  expect(await reads.take('g', 14n, 1_000, 1_000)).toBeUndefined();
  reads.offer('h', 10n, 10, Promise.resolve(withoutId(groupOf(11, 10), 15)));
  expect(await reads.take('h', 16n, 1_000, 1_000)).toBeUndefined();
  expect(reads.covered('h', 16n)).toBe(false);
});

test('a failed read is not taken; groups are apart', async () => {
  const reads = new LaneReads(8, 60_000);
  reads.offer('g', 0n, 10, Promise.reject(new Error('gone')));
  expect(await reads.take('g', 0n, 1_000, 1_000)).toBeUndefined();
  reads.offer('g', 0n, 10, Promise.resolve(groupOf(1, 10)));
  expect(await reads.take('other', 0n, 1_000, 1_000)).toBeUndefined();
  expect(await reads.take('g', 0n, 1_000, 1_000)).toBeDefined();
});

test('a lane waits for a running read that will hold its cursor, not for one that cannot', async () => {
  const reads = new LaneReads(8, 60_000);
  let finish: (batch: GroupBatch) => void = () => undefined;
  reads.offer('g', 100n, 50, new Promise<GroupBatch>((resolve) => (finish = resolve)));
  expect(reads.covered('g', 120n)).toBe(true);
  expect(reads.covered('g', 150n)).toBe(false); // beyond its LIMIT
  expect(reads.covered('g', 99n)).toBe(false);
  const waiting = reads.take('g', 120n, 60_000, 1_000);
  finish(groupOf(101, 50));
  expect((await waiting)?.[0]?.start).toBe(20);
  // Past the wait, a lane reads for itself.
  reads.offer('g', 500n, 50, new Promise<GroupBatch>(() => undefined));
  expect(await reads.take('g', 510n, 5, 1_000)).toBeUndefined();
});

test('a take goes on into the batches read from where the last one ends, up to its rows', async () => {
  const reads = new LaneReads(8, 60_000);
  reads.offer('g', 0n, 10, Promise.resolve(groupOf(1, 10)));
  reads.offer('g', 10n, 10, Promise.resolve(groupOf(11, 10)));
  reads.offer('g', 20n, 10, Promise.resolve(groupOf(21, 5)));
  reads.offer('g', 40n, 10, Promise.resolve(groupOf(41, 10))); // not where one ends
  await Promise.resolve();
  const all = await reads.take('g', 4n, 1_000, 1_000);
  expect(all?.map((s) => [s.start, s.full])).toEqual([
    [4, true],
    [0, true],
    [0, false],
  ]);
  const some = await reads.take('g', 4n, 1_000, 6);
  expect(some).toHaveLength(1);
});

test('a read-ahead runs one at a time and not where a read already holds the cursor', async () => {
  const reads = new LaneReads(8, 60_000);
  let finish: (batch: GroupBatch) => void = () => undefined;
  let started = 0;
  const slow = () => {
    started += 1;
    return new Promise<GroupBatch>((resolve) => (finish = resolve));
  };
  reads.readAhead('g', 0n, 10, slow);
  reads.readAhead('h', 0n, 10, slow);
  expect(started).toBe(1);
  const settled = reads.settled();
  finish(groupOf(1, 10));
  await settled;
  reads.readAhead('g', 3n, 10, slow);
  expect(started).toBe(1); // the batch from 0 holds 4
  expect(await reads.take('g', 3n, 1_000, 100)).toBeDefined();
});

test('batches no lane has taken from within the maximum age are let go', async () => {
  const reads = new LaneReads(8, -1);
  reads.offer('g', 0n, 10, Promise.resolve(groupOf(1, 10)));
  await Promise.resolve();
  reads.prune();
  expect(reads.covered('g', 0n)).toBe(false);
  expect(await reads.take('g', 0n, 1_000, 1_000)).toBeUndefined();
});

test("a lane's batch: its own events whole, the others passed, cut before its (keptLimit + 1)-th", () => {
  const batch = laneBatchOf([{ batch: groupOf(1, 10), start: 2, full: true }], lane(1, 2), false);
  // From id 3: 3 is lane 1 (own), 4 passed, 5 own, 6 passed, then 7 would be the third own.
  expect(ids(batch.events)).toEqual([3, 4, 5, 6]);
  expect(own(batch.events)).toEqual([3, 5]);
  expect(batch.cut).toBe(true);
  expect(batch.shared).toBe(false);
});

test("a lane's batch keeps only its types and spans the segments, the oldest xmin and latest head", () => {
  const batch = laneBatchOf(
    [
      { batch: groupOf(1, 6, 9n), start: 0, full: true },
      { batch: groupOf(7, 6, 5n), start: 0, full: false },
    ],
    lane(1, 100, ['A']),
    true,
  );
  expect(ids(batch.events)).toEqual(Array.from({ length: 12 }, (_, i) => i + 1));
  expect(own(batch.events)).toEqual([3, 9]); // lane 1 (odd) and type A (a multiple of 3)
  expect(batch.cut).toBe(false);
  expect(batch.shared).toBe(true);
  expect(batch.xmin).toBe(5n);
  expect(batch.head).toBe(113n);
});

test("lanes passing the same event of a batch share its stub, which carries only the event's id", () => {
  const segments = [{ batch: groupOf(1, 12), start: 0, full: false }];
  const first = laneBatchOf(segments, lane(0, 100, ['A']), false).events;
  const second = laneBatchOf(segments, lane(0, 100, ['B']), false).events;
  // Event 1 is lane 1's: both of lane 0's batches pass it, through the same stub.
  const stub = first.find((e) => e.id === 1n);
  expect(stub).toMatchObject({ type: PASSED_TYPE, streamId: '', data: {} });
  expect(second.find((e) => e.id === 1n)).toBe(stub);
  // Lane 1 keeps it whole all the same.
  expect(laneBatchOf(segments, lane(1, 100), false).events.find((e) => e.id === 1n)?.streamId).toBe('s-1');
});

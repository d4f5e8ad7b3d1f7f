import { afterEach, expect, test, vi } from 'vitest';
import type { EventRecord } from '../events.js';
import { SharedReads, type EventBatch } from './shared-reads.js';

const batchOf = (from: number, count: number): EventBatch => ({
  events: Array.from({ length: count }, (_, i): EventRecord => ({
    id: BigInt(from + i),
    streamId: 's',
    type: 'T',
    data: {},
    metadata: {},
    createdAt: new Date(0),
  })),
  xmin: 7n,
  snapshots: [{ xmin: 7n, xmax: 7n, xip: [] }],
  head: 1000n,
});

afterEach(() => {
  vi.useRealTimers();
});

test('a taker gets at most its limit, from the batch read at its own cursor only', async () => {
  const reads = new SharedReads(4, 1_000);
  reads.offer(10n, 8, Promise.resolve(batchOf(11, 8)));
  expect((await reads.take(10n, 5, 1_000))?.events.map((e) => e.id)).toEqual([11n, 12n, 13n, 14n, 15n]);
  expect((await reads.take(10n, 100, 1_000))?.events).toHaveLength(8);
  expect(await reads.take(11n, 5, 1_000)).toBeUndefined();
});

test('a batch with a hole (at its start or inside) is not handed out', async () => {
  const reads = new SharedReads(4, 1_000);
  reads.offer(10n, 4, Promise.resolve(batchOf(12, 4)));
  expect(await reads.take(10n, 4, 1_000)).toBeUndefined();
  const holed = batchOf(21, 4);
  reads.offer(20n, 3, Promise.resolve({ ...holed, events: holed.events.filter((e) => e.id !== 23n) }));
  expect(await reads.take(20n, 2, 1_000)).toBeUndefined();
  reads.offer(30n, 4, Promise.resolve(batchOf(31, 4)));
  expect((await reads.take(30n, 4, 1_000))?.events).toHaveLength(4);
});

test('a read that came back short or failed is not handed out', async () => {
  const reads = new SharedReads(4, 1_000);
  reads.offer(0n, 5, Promise.resolve(batchOf(1, 4)));
  expect(await reads.take(0n, 5, 1_000)).toBeUndefined();
  reads.offer(10n, 5, Promise.reject(new Error('connection lost')));
  expect(await reads.take(10n, 5, 1_000)).toBeUndefined();
});

test('a taker waits for a read still running', async () => {
  const reads = new SharedReads(4, 1_000);
  let finish!: (batch: EventBatch) => void;
  reads.offer(0n, 3, new Promise((resolve) => (finish = resolve)));
  const taking = reads.take(0n, 3, 1_000);
  finish(batchOf(1, 3));
  expect((await taking)?.events).toHaveLength(3);
});

test('a taker stops waiting for a read that does not settle in time', async () => {
  const reads = new SharedReads(4, 1_000);
  reads.offer(0n, 3, new Promise(() => undefined));
  expect(await reads.take(0n, 3, 10)).toBeUndefined();
});

test('only the newest entries are kept, and none past the maximum age', async () => {
  vi.useFakeTimers();
  const reads = new SharedReads(2, 1_000);
  reads.offer(0n, 2, Promise.resolve(batchOf(1, 2)));
  reads.offer(2n, 2, Promise.resolve(batchOf(3, 2)));
  reads.offer(4n, 2, Promise.resolve(batchOf(5, 2)));
  expect(reads.size).toBe(2);
  expect(await reads.take(0n, 2, 1_000)).toBeUndefined();
  expect(await reads.take(4n, 2, 1_000)).toBeDefined();
  vi.advanceTimersByTime(1_001);
  expect(await reads.take(4n, 2, 1_000)).toBeUndefined();
  reads.prune();
  expect(reads.size).toBe(0);
});

test('one read-ahead runs at a time, none for a cursor already read, and settled() waits for it', async () => {
  const reads = new SharedReads(4, 1_000);
  let finish!: (batch: EventBatch) => void;
  let started = 0;
  const read = () => {
    started += 1;
    return new Promise<EventBatch>((resolve) => (finish = resolve));
  };
  reads.readAhead(0n, 2, read);
  reads.readAhead(2n, 2, read);
  expect(started).toBe(1);
  let settled = false;
  const settling = reads.settled().then(() => (settled = true));
  await Promise.resolve();
  expect(settled).toBe(false);
  finish(batchOf(1, 2));
  await settling;
  expect((await reads.take(0n, 2, 1_000))?.events).toHaveLength(2);
  reads.readAhead(0n, 2, read);
  expect(started).toBe(1);
});

// The chaos checker on hand-made histories (no database): it must catch each kind of violation.
import { describe, expect, test } from 'vitest';
import { check, quantile, recoveryTimes, type CheckInput, type Delivery, type Write } from './checker.js';

const fast = { name: 'c', ordering: 'fast', transactional: false } as const;

function input(overrides: Partial<CheckInput>): CheckInput {
  return {
    consumers: [fast],
    committedIds: [1, 2, 3],
    deliveries: [],
    writes: [{ w: 'w1', ids: [1, 2, 3], outcome: 'commit', t: 10 }],
    samples: [],
    transactionalRows: new Map(),
    ...overrides,
  };
}

/** Deliveries to consumer `c` by process `p`, one per millisecond from t = 100, turn locked at f. */
function delivered(ids: number[], p = 'd#1', f = 90, from = 100): Delivery[] {
  return ids.map((id, i) => ({ c: 'c', id, p, t: from + i, f }));
}

describe('chaos checker', () => {
  test('a clean history has nothing to report', () => {
    const report = check(input({ deliveries: delivered([1, 2, 3]) }));
    expect(report.consumers).toEqual([
      { consumer: 'c', lost: 0, duplicated: 0, late: 0, inversions: 0, cursorRegressions: 0, phantoms: 0 },
    ]);
    expect(report.events).toEqual({ appended: 3, committed: 3, aborted: 0 });
    expect(report.acked).toEqual({ total: 3, missing: 0, missingIds: [] });
  });

  test('detects a lost event', () => {
    const report = check(input({ deliveries: delivered([1, 3]) }));
    expect(report.consumers[0]).toMatchObject({ lost: 1 });
    expect(report.lostIds).toEqual({ c: [2] });
  });

  test('detects a duplicate and names the first delivery', () => {
    const report = check(
      input({ deliveries: [...delivered([1, 2], 'd#1'), ...delivered([2, 3], 'd#2', 200, 200)] }),
    );
    expect(report.consumers[0]).toMatchObject({ duplicated: 1, lost: 0, inversions: 0, late: 0 });
    expect(report.duplicates).toEqual([{ consumer: 'c', id: 2, firstBy: 'd#1', firstAt: 101, extra: 1 }]);
  });

  test('tells a late gap delivery from an inversion by when the lower id committed', () => {
    // Turn locked at 90 delivers 3 at 100; 2 comes at 200 in a later turn (locked at 190).
    const deliveries = [...delivered([1, 3]), ...delivered([2], 'd#1', 190, 200)];
    // 2 committed at 150: after the turn that delivered 3 had fetched, so it is a late delivery.
    const late = check(
      input({
        deliveries,
        writes: [
          { w: 'w1', ids: [1, 3], outcome: 'commit', t: 10 },
          { w: 'w2', ids: [2], outcome: 'commit', t: 150 },
        ],
      }),
    );
    expect(late.consumers[0]).toMatchObject({ late: 1, inversions: 0 });
    // 2 committed at 50, before the turn that delivered 3 locked its row: that fetch saw it.
    const inverted = check(
      input({
        deliveries,
        writes: [
          { w: 'w1', ids: [1, 3], outcome: 'commit', t: 10 },
          { w: 'w2', ids: [2], outcome: 'commit', t: 50 },
        ],
      }),
    );
    expect(inverted.consumers[0]).toMatchObject({ late: 0, inversions: 1 });
    expect(inverted.inversions[0]).toMatchObject({
      id: 2,
      above: 3,
      committedBy: 50,
      higherTurnLockedAt: 90,
    });
  });

  test('a commit acknowledged only after the fetch is never an inversion (no false positives)', () => {
    // The acknowledgement (after COMMIT returned) comes later than the lock: it cannot prove
    // visibility at the fetch, so it is counted as late even when delivered long after.
    const report = check(
      input({
        deliveries: [...delivered([1, 3], 'd#1', 90), ...delivered([2], 'd#2', 500, 500)],
        writes: [
          { w: 'w1', ids: [1, 3], outcome: 'commit', t: 10 },
          { w: 'w2', ids: [2], outcome: 'commit', t: 95 },
        ],
      }),
    );
    expect(report.consumers[0]).toMatchObject({ late: 1, inversions: 0 });
  });

  test('a redelivery below the highest id is a duplicate, not an order event', () => {
    const report = check(
      input({ deliveries: [...delivered([1, 2, 3]), ...delivered([2, 3], 'd#2', 200, 200)] }),
    );
    expect(report.consumers[0]).toMatchObject({ duplicated: 2, late: 0, inversions: 0 });
  });

  test('any delivery below the highest id is an inversion for a strict consumer', () => {
    const report = check(
      input({
        consumers: [{ ...fast, ordering: 'strict' }],
        deliveries: [...delivered([1, 3]), ...delivered([2], 'd#1', 190, 200)],
        writes: [
          { w: 'w1', ids: [1, 3], outcome: 'commit', t: 10 },
          { w: 'w2', ids: [2], outcome: 'commit', t: 150 },
        ],
      }),
    );
    expect(report.consumers[0]).toMatchObject({ late: 0, inversions: 1 });
  });

  test('orders deliveries across processes by time', () => {
    // Process 2's records come first in the input but happened later.
    const report = check(
      input({ deliveries: [...delivered([3], 'd#2', 150, 160), ...delivered([1, 2], 'd#1')] }),
    );
    expect(report.consumers[0]).toMatchObject({ late: 0, inversions: 0, lost: 0 });
  });

  test('detects a cursor regression', () => {
    const report = check(
      input({
        deliveries: delivered([1, 2, 3]),
        samples: [
          { t: 1, consumer: 'c', cursor: 1 },
          { t: 2, consumer: 'c', cursor: 3 },
          { t: 3, consumer: 'c', cursor: 2 },
          { t: 4, consumer: 'c', cursor: 3 },
        ],
      }),
    );
    expect(report.consumers[0]).toMatchObject({ cursorRegressions: 1 });
  });

  test('detects phantoms: rolled-back ids and ids that never existed', () => {
    const writes: Write[] = [
      { w: 'w1', ids: [1, 2, 3], outcome: 'commit', t: 10 },
      { w: 'w1', ids: [4], outcome: 'rollback', t: 20 },
    ];
    const report = check(input({ writes, deliveries: delivered([1, 2, 3, 4, 7]) }));
    expect(report.consumers[0]).toMatchObject({ phantoms: 2, lost: 0 });
    expect(report.phantomIds).toEqual({ c: [4, 7] });
    expect(report.rolledBackDelivered).toBe(1);
    expect(report.events).toEqual({ appended: 4, committed: 3, aborted: 1 });
  });

  test('checks acknowledged appends, rolled-back ids in the log and unknown outcomes', () => {
    const report = check(
      input({
        committedIds: [1, 3, 5],
        writes: [
          { w: 'w1', ids: [1, 2], outcome: 'commit', t: 10 },
          { w: 'w1', ids: [3], outcome: 'rollback', t: 20 },
          { w: 'w1', ids: [4, 5], outcome: 'unknown', t: 30 },
        ],
        deliveries: delivered([1, 3, 5]),
      }),
    );
    expect(report.acked).toEqual({ total: 2, missing: 1, missingIds: [2] });
    expect(report.rolledBackPresent).toBe(1);
    expect(report.unknown).toEqual({ ids: 2, committed: 1 });
  });

  test('an id the sequence handed out again after a crash is the later write’s from that crash on', () => {
    const crash = { quitAt: 30, acceptAt: 40 };
    const writes: Write[] = [
      { w: 'w1', ids: [1], outcome: 'commit', t: 10, a: 5 },
      { w: 'w1', ids: [2, 3], outcome: 'rollback', t: 20, a: 15 },
      { w: 'w2', ids: [2], outcome: 'commit', t: 50, a: 45 },
    ];
    const deliveredAt = (entries: [number, number, number?][]): Delivery[] =>
      entries.map(([id, t, f]) => ({ c: 'c', id, p: 'p1', t, f }));
    const base = {
      committedIds: [1, 2],
      writes,
      deliveries: deliveredAt([
        [1, 11, 6],
        [2, 60, 55],
      ]),
    };
    // Without a crash, a rolled-back id in the log is a violation.
    const uncrashed = check(input(base));
    expect(uncrashed).toMatchObject({ rolledBackPresent: 1, rolledBackDelivered: 1, reissuedIds: 0 });
    // With a crash between the two draws, id 2 is the later write's.
    const crashed = check(input({ ...base, crashes: [crash] }));
    expect(crashed).toMatchObject({ rolledBackPresent: 0, rolledBackDelivered: 0, reissuedIds: 1 });
    expect(crashed.consumers[0]).toMatchObject({ lost: 0, phantoms: 0 });
    // A delivery of the id fetched before the crash was of the rolled-back event, even if its
    // handler ran after SIGQUIT; the later write's event is then lost.
    const early = check(
      input({
        ...base,
        crashes: [crash],
        deliveries: deliveredAt([
          [1, 11, 6],
          [2, 31, 25],
        ]),
      }),
    );
    expect(early.rolledBackDelivered).toBe(1);
    expect(early.consumers[0]).toMatchObject({ lost: 1 });
    // Without the fetch's time, a call before the server accepted again is the rolled-back event's.
    const unfetched = check(
      input({
        ...base,
        crashes: [crash],
        deliveries: deliveredAt([
          [1, 11],
          [2, 35],
        ]),
      }),
    );
    expect(unfetched.rolledBackDelivered).toBe(1);
    // A crash after the later write's draw, or before the rolled-back write's, reissues nothing.
    expect(check(input({ ...base, crashes: [{ quitAt: 70, acceptAt: 80 }] })).rolledBackPresent).toBe(1);
    expect(check(input({ ...base, crashes: [{ quitAt: 12, acceptAt: 13 }] })).rolledBackPresent).toBe(1);
  });

  test('compares a transactional consumer’s rows with the log exactly', () => {
    const report = check(
      input({
        consumers: [{ name: 'c', ordering: 'fast', transactional: true }],
        deliveries: delivered([1, 2, 3]),
        transactionalRows: new Map([['c', [1, 3, 9]]]),
      }),
    );
    expect(report.transactional).toEqual([{ consumer: 'c', missing: 1, extra: 1 }]);
  });

  test('afterId restricts the check to a later phase', () => {
    const report = check(
      input({
        committedIds: [1, 2, 3, 4],
        writes: [{ w: 'w1', ids: [1, 2, 3, 4], outcome: 'commit', t: 10 }],
        deliveries: [...delivered([1, 1, 3, 4])],
        afterId: 2,
      }),
    );
    expect(report.consumers[0]).toMatchObject({ lost: 0, duplicated: 0 });
    expect(report.events.committed).toBe(2);
  });

  test('recovery: time from a fault to the next delivery of an event committed after it', () => {
    const deliveries: Delivery[] = [
      { c: 'c', id: 1, p: 'd', t: 1_010 },
      { c: 'c', id: 2, p: 'd', t: 1_500 },
      { c: 'c', id: 3, p: 'd', t: 1_700 },
    ];
    const writes: Write[] = [
      { w: 'w', ids: [1, 2], outcome: 'commit', t: 900 },
      { w: 'w', ids: [3], outcome: 'commit', t: 1_200 },
    ];
    expect(recoveryTimes([1_000], deliveries, writes)).toEqual([700]);
    expect(recoveryTimes([1_000], deliveries, writes, { anyEvent: true })).toEqual([10]);
    expect(recoveryTimes([2_000], deliveries, writes)).toEqual([NaN]);
    expect(quantile([5, 1, 3, NaN], 0.5)).toBe(3);
  });

  test('a laned consumer is checked per stream: other streams out of order are fine, its own are not', () => {
    const laned = { name: 'c', ordering: 'fast', transactional: false, laned: true } as const;
    // Streams: 1, 3 and 5 are stream 0; 2 and 4 stream 1. Every id committed at 10.
    const streamOf = new Map([
      [1, 0],
      [2, 1],
      [3, 0],
      [4, 1],
      [5, 0],
    ]);
    const base = {
      consumers: [laned],
      committedIds: [1, 2, 3, 4, 5],
      writes: [{ w: 'w1', ids: [1, 2, 3, 4, 5], outcome: 'commit', t: 10 } as const],
      streamOf,
    };
    // The lane of stream 1 runs behind the lane of stream 0: no inversion.
    const acrossStreams = check(input({ ...base, deliveries: delivered([1, 3, 5, 2, 4]) }));
    expect(acrossStreams.consumers[0]).toMatchObject({ inversions: 0, late: 0, lost: 0 });
    // Within stream 0, 3 after 5 although it was visible before 5's turn fetched: an inversion.
    const withinStream = check(input({ ...base, deliveries: delivered([1, 5, 3, 2, 4]) }));
    expect(withinStream.consumers[0]).toMatchObject({ inversions: 1 });
    expect(withinStream.inversions[0]).toMatchObject({ id: 3, above: 5 });
    // Each lane's cursor is a series of its own: no regression across lanes.
    const samples = [
      { t: 1, consumer: 'c@*0/2', cursor: 5 },
      { t: 1, consumer: 'c@*1/2', cursor: 2 },
      { t: 2, consumer: 'c@*0/2', cursor: 5 },
      { t: 2, consumer: 'c@*1/2', cursor: 4 },
      { t: 3, consumer: 'c@*1/2', cursor: 3 },
    ];
    expect(
      check(input({ ...base, deliveries: delivered([1, 2, 3, 4, 5]), samples })).consumers[0],
    ).toMatchObject({
      cursorRegressions: 1,
    });
  });
});

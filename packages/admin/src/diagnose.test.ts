// The widening of the 32-bit xids that pg_stat_activity and pg_prepared_xacts show (widenXid).
import { expect, test } from 'vitest';
import { widenXid } from './diagnose.js';

const SPAN = 2n ** 32n;

test('an xid drawn after the snapshot, before the first wraparound, is not taken for an earlier epoch', () => {
  expect(widenXid(1_005n, 1_000n)).toBe(1_005n);
  expect(widenXid(995n, 1_000n)).toBe(995n);
  expect(widenXid(SPAN - 3n, SPAN + 5n)).toBe(SPAN - 3n); // before the wrap, read after it
  expect(widenXid(3n, SPAN - 2n)).toBe(SPAN + 3n); // after the wrap, read before it
});

test('any xid within 2³¹ of the xmax, on either side and across epochs, is found again', () => {
  const offsets = [
    -(2n ** 31n) + 1n,
    -(2n ** 30n),
    -65_536n,
    -1n,
    0n,
    1n,
    65_536n,
    2n ** 30n,
    2n ** 31n - 1n,
  ];
  for (const epoch of [0n, 1n, 7n, 2n ** 20n]) {
    for (const low of [2n ** 31n, 2n ** 31n + 1n, SPAN - 1n, SPAN - 2n ** 30n, 2n ** 32n + 3n]) {
      const xmax8 = epoch * SPAN + low;
      for (const offset of offsets) {
        const xid8 = xmax8 + offset;
        expect(widenXid(xid8 % SPAN, xmax8), `xmax ${xmax8}, xid ${xid8}`).toBe(xid8);
      }
    }
  }
});

import { expect, test } from 'vitest';
import { pgArray } from './pg-array.js';

test('quotes every element, escapes quotes and backslashes, and writes NULL bare', () => {
  expect(pgArray([])).toBe('{}');
  expect(pgArray(['a', 'b c', 'x"y', 'back\\slash', null, 12n, 3])).toBe(
    '{"a","b c","x\\"y","back\\\\slash",NULL,"12","3"}',
  );
});

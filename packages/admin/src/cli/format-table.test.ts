import { expect, test } from 'vitest';
import { formatTable } from './format-table.js';

test('a line break or tab in a cell is written out: one row stays one line', () => {
  const table = formatTable(
    [{ title: 'STREAM' }, { title: 'ID', align: 'right' }],
    [
      ['a\nFAKE   99', '1'],
      ['b\tc\rd', '22'],
    ],
  );
  expect(table.split('\n')).toEqual(['STREAM        ID', 'a\\nFAKE   99   1', 'b\\tc\\rd       22']);
});

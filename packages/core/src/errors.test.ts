import { readFile } from 'node:fs/promises';
import { describe, expect, test } from 'vitest';
import { ERROR_CODES, InvalidOptionError, SluiceError } from './errors.js';

describe('error codes', () => {
  test('every code has a heading in docs/errors.md, and every heading is a code', async () => {
    const doc = await readFile(new URL('../../../docs/errors.md', import.meta.url), 'utf8');
    const headings = [...doc.matchAll(/^## (\S+)$/gm)].map((m) => m[1]);
    expect([...headings].sort()).toEqual([...ERROR_CODES].sort());
  });

  test('errors carry their class name, code and structured fields', () => {
    const error = new InvalidOptionError('batchSize', 'must be at least 1');
    expect(error).toBeInstanceOf(SluiceError);
    expect(error).toMatchObject({
      name: 'InvalidOptionError',
      code: 'SLUICE_INVALID_OPTION',
      option: 'batchSize',
    });
    expect(error.message).toBe('Invalid option `batchSize`: must be at least 1');
  });
});

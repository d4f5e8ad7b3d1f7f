import { readFile } from 'node:fs/promises';
import { describe, expect, test } from 'vitest';
import {
  ERROR_CODES,
  InvalidOptionError,
  MAX_ERROR_TEXT,
  messageOf,
  PostgresUnsupportedError,
  SluiceError,
} from './errors.js';

describe('error codes', () => {
  test('every code has a heading in docs/errors.md, in the part for where it comes from, and every heading is a code', async () => {
    const doc = await readFile(new URL('../../../docs/errors.md', import.meta.url), 'utf8');
    const parts = doc.split(/^(?=## (?:HTTP errors of the ops routes|Errors of the sluice CLI)$)/m);
    expect(parts).toHaveLength(3);
    const [thrown, opsRoutes, cli] = parts.map((part) =>
      [...part.matchAll(/^#{2,3} (SLUICE_\S+)$/gm)].map((m) => m[1]),
    );
    const codesFrom = (source: string) =>
      Object.entries(ERROR_CODES)
        .filter(([, from]) => from === source)
        .map(([code]) => code)
        .sort();
    expect([...(thrown ?? [])].sort()).toEqual(codesFrom('thrown'));
    expect([...(opsRoutes ?? [])].sort()).toEqual(codesFrom('ops-route'));
    expect([...(cli ?? [])].sort()).toEqual(codesFrom('cli'));
    const all = [...doc.matchAll(/^#{2,3} (SLUICE_\S+)$/gm)].map((m) => m[1]);
    expect(new Set(all).size).toBe(all.length);
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

  // A server older than the minimum cannot be started here (the test servers are new): the error
  // verifySchema() throws for one, by itself.
  test('an unsupported server version is named with the minimum, under its code', () => {
    const error = new PostgresUnsupportedError(120_000, 130_000);
    expect(error).toMatchObject({ code: 'SLUICE_POSTGRES_UNSUPPORTED', serverVersionNum: 120_000 });
    expect(error.message).toBe('PostgreSQL 120000 is not supported: Sluice needs 130000 or newer');
  });
});

describe('messageOf', () => {
  test("an error's text is kept up to MAX_ERROR_TEXT characters, saying how much more there was, never half a pair", () => {
    const long = messageOf(new Error('x'.repeat(MAX_ERROR_TEXT + 500)));
    expect(long).toBe(`${'x'.repeat(MAX_ERROR_TEXT)}… (500 more characters)`);
    expect(messageOf('y'.repeat(MAX_ERROR_TEXT))).toBe('y'.repeat(MAX_ERROR_TEXT));
    // A surrogate pair across the cut is left out whole.
    const pair = messageOf(`${'z'.repeat(MAX_ERROR_TEXT - 1)}😀tail`);
    expect(pair).toBe(`${'z'.repeat(MAX_ERROR_TEXT - 1)}… (6 more characters)`);
    expect(messageOf(new Error('a\u0000b'))).toBe('a\uFFFDb');
  });
});

import { describe, expect, test } from 'vitest';
import { keyText } from './format-text.js';
import { parseKey, parseTime, parseVersion } from './parse-values.js';
import { UsageError } from './usage-error.js';

describe('--key', () => {
  test('takes a key as sluice parked shows it: as it is, or JSON-quoted', () => {
    for (const key of [
      'order-17',
      '',
      'k/2 %2F',
      'line1\nline2',
      'say "hi"',
      '"quoted"',
      'back\\slash',
      'tab\there',
    ]) {
      expect(parseKey(keyText(key)), JSON.stringify(key)).toBe(key);
    }
    expect(parseKey('a"b')).toBe('a"b'); // a quote inside is part of the key
    expect(parseKey('')).toBe('');
  });

  test('a quoted text that is not a JSON string is a usage error', () => {
    expect(() => parseKey('"not \\x json"')).toThrow(UsageError);
    expect(() => parseKey('"a" "b"')).toThrow(UsageError);
  });
});

describe('--until', () => {
  test('takes an ISO 8601 time with a zone; refuses a leap second saying so, and a time without a zone', () => {
    expect(parseTime('2096-06-01T14:00+02:00', '--until')).toEqual(new Date('2096-06-01T12:00:00Z'));
    expect(() => parseTime('2096-12-31T23:59:60Z', '--until')).toThrow(
      new UsageError(
        '--until 2096-12-31T23:59:60Z is a leap second, which Sluice cannot hold: give the second after it',
      ),
    );
    expect(() => parseTime('2096-06-01T12:30:60Z', '--until')).toThrow(
      new UsageError(
        '--until must be an ISO 8601 time with a time zone, like 2025-06-01T12:00:00Z, got "2096-06-01T12:30:60Z"',
      ),
    );
    expect(() => parseTime('2096-06-01T12:00:00', '--until')).toThrow(UsageError);
    expect(() => parseTime('2096-02-30T12:00:00Z', '--until')).toThrow(UsageError);
  });
});

describe('a version', () => {
  test('is digits, from 1 to 2147483647; the message says which rule a value breaks', () => {
    expect(parseVersion('2')).toBe(2);
    expect(parseVersion('2147483647')).toBe(2_147_483_647);
    expect(() => parseVersion('2a')).toThrow(
      new UsageError('--version must be a version number (digits only, 1 or more), got "2a"'),
    );
    for (const text of ['0', '2147483648', '99999999999']) {
      expect(() => parseVersion(text)).toThrow(
        new UsageError(`--version must be a version number from 1 to 2147483647, got ${text}`),
      );
    }
  });
});

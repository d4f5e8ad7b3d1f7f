import { describe, expect, test } from 'vitest';
import { keyText } from './format-text.js';
import { parseKey } from './parse-values.js';
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

import { expect, test } from 'vitest';
import { toJson } from './to-json.js';

test('ids as decimal strings and times as ISO 8601, indented for people', () => {
  const at = new Date('2026-01-02T03:04:05.678Z');
  expect(toJson({ id: 2n ** 63n - 1n, at, list: [1n, null], none: undefined })).toBe(
    '{\n  "id": "9223372036854775807",\n  "at": "2026-01-02T03:04:05.678Z",\n  "list": [\n    "1",\n    null\n  ]\n}',
  );
});

test('data nested deeper than a call stack can serialise is shown down to 1000 levels, and the rest said', () => {
  // 10,000 levels, as PostgreSQL stores them (a jsonb parsed by JSON.parse, which does not recurse).
  const data: unknown = JSON.parse(`{"a":${'['.repeat(10_000)}${']'.repeat(10_000)}}`);
  const text = toJson({ data });
  const shown = JSON.parse(text) as { data: { a: unknown } };
  let levels = 0;
  let at: unknown = shown.data.a;
  while (Array.isArray(at)) {
    at = at[0];
    levels += 1;
  }
  // The wrapper and data are two of the thousand levels.
  expect({ levels, at }).toEqual({ levels: 998, at: '[nested deeper than 1000 levels: not shown]' });
});

/** Converts a value for a JSON response: bigints to decimal strings, dates to ISO strings. */
export function toJson(value: unknown): unknown {
  if (typeof value === 'bigint') return value.toString();
  if (value instanceof Date) return value.toISOString();
  if (Array.isArray(value)) return value.map(toJson);
  if (typeof value === 'object' && value !== null) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, toJson(v)]));
  }
  return value;
}

/**
 * Finds a JSON number that cannot be an exact id: anything above 2^53-1 was already rounded by
 * JSON.parse, so it is refused rather than acted on (an operator could skip the wrong event).
 */
export function findUnsafeNumber(value: unknown, path = 'body'): string | undefined {
  if (typeof value === 'number')
    return Number.isSafeInteger(value) || !Number.isInteger(value) ? undefined : path;
  if (Array.isArray(value)) {
    for (const [i, item] of value.entries()) {
      const found = findUnsafeNumber(item, `${path}[${i}]`);
      if (found) return found;
    }
  } else if (typeof value === 'object' && value !== null) {
    for (const [key, item] of Object.entries(value)) {
      const found = findUnsafeNumber(item, `${path}.${key}`);
      if (found) return found;
    }
  }
  return undefined;
}

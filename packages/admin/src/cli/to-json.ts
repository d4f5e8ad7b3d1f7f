/**
 * JSON for scripts: bigints (ids, cursors) as decimal strings, since a JSON number loses precision
 * beyond 2^53; dates as ISO 8601 (Date#toJSON runs before the replacer).
 */
export function toJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => (typeof v === 'bigint' ? v.toString() : v), 2);
}

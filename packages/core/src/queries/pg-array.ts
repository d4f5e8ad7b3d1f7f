/**
 * A PostgreSQL array literal (`{"a","b",NULL}`) for a text parameter cast to an array type in SQL.
 * Sluice never relies on postgres.js to serialise arrays: without `fetch_types` (common behind
 * PgBouncer) it sends a JS array as `a,b,c`, which PostgreSQL rejects.
 */
export function pgArray(values: readonly (string | bigint | number | null)[]): string {
  const elements = values.map((value) =>
    value === null ? 'NULL' : `"${String(value).replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`,
  );
  return `{${elements.join(',')}}`;
}

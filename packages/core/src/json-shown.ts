/**
 * How deep the ops routes and the CLI's `--json` show nested data (an event's): a value deeper
 * stands as the string NESTED_TOO_DEEP (docs/operating.md#http-fastify-plugin).
 */
export const MAX_SHOWN_DEPTH = 1_000;
const NESTED_TOO_DEEP = `[nested deeper than ${MAX_SHOWN_DEPTH} levels: not shown]`;

/**
 * Converts a value to show as JSON: bigints to decimal strings, dates to ISO strings, and values
 * nested deeper than {@link MAX_SHOWN_DEPTH} to a string that says so. Walks without recursion:
 * an event's data may nest as deep as PostgreSQL's jsonb accepts (thousands of levels, deeper than
 * append()'s JSON.stringify writes), and the operator must still be able to read the event a
 * consumer stopped on. The result goes to JSON.stringify, which recurses: the depth cap is what
 * keeps that within the call stack.
 */
export function toShownJson(value: unknown): unknown {
  const root = containerLike(value);
  if (root === undefined) return leafJson(value);
  const pending: [object, Record<string, unknown> | unknown[], number][] = [[value as object, root, 1]];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const [source, target, depth] = next;
    const entries: [string, unknown][] = Array.isArray(source)
      ? source.map((v: unknown, i) => [String(i), v])
      : Object.entries(source);
    for (const [key, v] of entries) {
      const container = containerLike(v);
      let shown: unknown;
      if (container === undefined) shown = leafJson(v);
      else if (depth >= MAX_SHOWN_DEPTH) shown = NESTED_TOO_DEEP;
      else {
        pending.push([v as object, container, depth + 1]);
        shown = container;
      }
      // An own property even for a key named __proto__ (as Object.fromEntries makes it).
      Object.defineProperty(target, key, {
        value: shown,
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
  }
  return root;
}

/** An empty array or object to copy `value` into, or undefined when it is not one (a leaf). */
function containerLike(value: unknown): Record<string, unknown> | unknown[] | undefined {
  if (Array.isArray(value)) return [];
  if (typeof value === 'object' && value !== null && !(value instanceof Date)) return {};
  return undefined;
}

function leafJson(value: unknown): unknown {
  if (typeof value === 'bigint') return value.toString();
  if (value instanceof Date) return value.toISOString();
  return value;
}

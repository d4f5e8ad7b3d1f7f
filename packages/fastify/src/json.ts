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

/** Ops request bodies are flat; anything nested deeper is refused before it is walked further. */
export const MAX_BODY_DEPTH = 32;

/**
 * Finds what makes a request body unusable before validation, as a message for a 400: a JSON number
 * that cannot be an exact id (anything above 2^53-1 was already rounded by JSON.parse, so it is
 * refused rather than acted on: an operator could skip the wrong event), or nesting deeper than
 * {@link MAX_BODY_DEPTH}. Walks without recursion, so no body can exhaust the stack.
 */
export function findBodyProblem(body: unknown): string | undefined {
  const pending: { value: unknown; path: string; depth: number }[] = [
    { value: body, path: 'body', depth: 0 },
  ];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const { value, path, depth } = next;
    if (typeof value === 'number') {
      if (Number.isInteger(value) && !Number.isSafeInteger(value))
        return `${path} is a number beyond 2^53-1 and lost precision; send ids as strings`;
      continue;
    }
    if (typeof value !== 'object' || value === null) continue;
    if (depth >= MAX_BODY_DEPTH) return `the body is nested deeper than ${MAX_BODY_DEPTH} levels`;
    const entries = Array.isArray(value)
      ? value.map((item, i): [string, unknown] => [`[${i}]`, item])
      : Object.entries(value).map(([key, item]): [string, unknown] => [`.${key}`, item]);
    for (let i = entries.length - 1; i >= 0; i -= 1) {
      const [step, item] = entries[i] as [string, unknown];
      pending.push({ value: item, path: path + step, depth: depth + 1 });
    }
  }
  return undefined;
}

// A JSON response shows nested data as the CLI's --json does: bigints as decimal strings, dates as
// ISO strings, down to MAX_SHOWN_DEPTH levels, walked without recursion (core's json-shown.ts).
export { toShownJson as toJson } from '@sluice/core/internal';

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
        return `${path} is a number beyond 2^53-1 and lost precision: no duration, count or limit is that large, and ids go as strings`;
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

/** The part of a JSON schema the strict check reads (the ops routes' schemas, schemas.ts). */
interface SchemaShape {
  readonly type?: string;
  readonly anyOf?: readonly SchemaShape[];
  readonly items?: SchemaShape;
  readonly properties?: Readonly<Record<string, SchemaShape>>;
  readonly additionalProperties?: boolean;
}

/**
 * Finds, as a message for a 400, what the host's Ajv would quietly mend in an ops body: a field
 * the route does not know (Fastify's default Ajv removes it, so a misspelt `forMs` would disable a
 * consumer with no end), or a value of another JSON type than the field's (its default Ajv coerces
 * `"true"` to true and `"5"` to 5). The ops routes take their input exactly as their schemas say,
 * whatever Ajv options the host app has; Ajv then checks the rest (patterns, ranges, required).
 * In a query string, where every value is text, only unknown parameters are refused; a write route
 * without a query schema takes none (NO_PARAMETERS).
 */
export function findStrictProblem(
  input: unknown,
  schema: unknown,
  part: 'body' | 'query',
): string | undefined {
  const shape = schema as SchemaShape | undefined;
  if (!shape?.properties || !isPlainObject(input)) return undefined;
  for (const [key, value] of Object.entries(input)) {
    // Its own fields only: `toString` or `constructor` would otherwise be found on the prototype.
    const field = Object.hasOwn(shape.properties, key) ? shape.properties[key] : undefined;
    if (field === undefined) {
      if (shape.additionalProperties !== false) continue;
      const known = Object.keys(shape.properties);
      const what = part === 'query' ? 'query parameter' : 'field';
      return `${part}.${key} is not a ${what} of this request (${known.length > 0 ? `its ${what}s: ${known.join(', ')}` : `it takes no ${what}`})`;
    }
    if (part === 'body') {
      const problem = typeProblem(value, field, `${part}.${key}`);
      if (problem !== undefined) return problem;
    } else if (field.type === 'integer' && typeof value === 'string' && !/^[0-9]+$/.test(value)) {
      // Ajv would coerce `1e2`, `0x10` or ` 5` to a number: a count is written in digits.
      return `query.${key} must be written in digits, not ${JSON.stringify(value)}`;
    }
  }
  return undefined;
}

/** A query string for a route that takes no parameters. */
export const NO_PARAMETERS = { type: 'object', properties: {}, additionalProperties: false } as const;

/** Why `value` is not of the JSON type `field` declares (each item of an array too), if it is not. */
function typeProblem(value: unknown, field: SchemaShape, path: string): string | undefined {
  const options =
    field.type !== undefined ? [field] : (field.anyOf ?? []).filter((o) => o.type !== undefined);
  if (options.length === 0) return undefined;
  const matching = options.find((option) => hasJsonType(value, option.type as string));
  if (!matching) {
    return `${path} must be ${options.map((o) => article(o.type as string)).join(' or ')}, not ${article(jsonTypeOf(value))}`;
  }
  if (Array.isArray(value) && matching.items) {
    for (const [i, item] of value.entries()) {
      const problem = typeProblem(item, matching.items, `${path}[${i}]`);
      if (problem !== undefined) return problem;
    }
  }
  return undefined;
}

function hasJsonType(value: unknown, type: string): boolean {
  switch (type) {
    case 'null':
      return value === null;
    case 'boolean':
      return typeof value === 'boolean';
    case 'string':
      return typeof value === 'string';
    case 'integer':
      return typeof value === 'number' && Number.isInteger(value);
    case 'number':
      return typeof value === 'number';
    case 'object':
      return isPlainObject(value);
    case 'array':
      return Array.isArray(value);
    default:
      return true;
  }
}

function jsonTypeOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number';
  return typeof value;
}

function article(type: string): string {
  return type === 'null' ? 'null' : `${/^[aeiou]/.test(type) ? 'an' : 'a'} ${type}`;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * A query string's percent-escape that is not UTF-8 (`?key=%ff`): the host's parser keeps such a
 * value as it was written, so `%ff` would be taken for a key spelt that way. Refused instead, as a
 * path parameter with one is.
 */
export function malformedEscape(url: string | undefined): string | undefined {
  const query = url === undefined ? -1 : url.indexOf('?');
  if (url === undefined || query === -1) return undefined;
  for (const part of url.slice(query + 1).split(/[&=]/)) {
    if (!part.includes('%')) continue;
    try {
      decodeURIComponent(part.replace(/\+/g, ' '));
    } catch {
      return `the query string holds a malformed percent-escape (${part.slice(0, 40)}): escape it as UTF-8`;
    }
  }
  return undefined;
}

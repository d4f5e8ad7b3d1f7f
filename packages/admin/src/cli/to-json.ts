import { toShownJson } from '@sluice/core/internal';

/**
 * JSON for scripts: bigints (ids, cursors) as decimal strings, since a JSON number loses precision
 * beyond 2^53; dates as ISO 8601; an event's data down to MAX_SHOWN_DEPTH levels, as the ops routes
 * show it (docs/operating.md#http-fastify-plugin): JSON.stringify recurses, and PostgreSQL stores
 * jsonb deeper than a call stack can write.
 */
export function toJson(value: unknown): string {
  return JSON.stringify(toShownJson(value), null, 2);
}

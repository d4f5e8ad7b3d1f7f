import { InvalidOptionError } from '../errors.js';

export const DEFAULT_SCHEMA = 'sluice';

// A plain identifier keeps every derived name (the NOTIFY channel, the advisory lock key, log
// lines, psql's :SLUICE_SCHEMA variable) unambiguous. 63 bytes is PostgreSQL's NAMEDATALEN - 1:
// a longer name would be silently truncated and could collide with another schema.
const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

/** Validates the `schema` option and applies the default. @throws {InvalidOptionError} */
export function resolveSchemaName(schema: string | undefined): string {
  if (schema === undefined) return DEFAULT_SCHEMA;
  if (typeof schema !== 'string' || !SCHEMA_NAME.test(schema)) {
    throw new InvalidOptionError(
      'schema',
      `must be a lower-case identifier of at most 63 characters (letters, digits, _), got ${JSON.stringify(schema)}`,
    );
  }
  return schema;
}

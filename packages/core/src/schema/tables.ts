import { InvalidOptionError } from '../errors.js';
import type { Identifier, Queryable } from '../sql-types.js';

/** Escaped identifiers for every Sluice table in one schema. */
export interface Tables {
  readonly schema: Identifier;
  readonly events: Identifier;
  readonly consumers: Identifier;
  readonly gaps: Identifier;
  readonly turnStarts: Identifier;
  readonly deadLetters: Identifier;
  readonly audit: Identifier;
  readonly laneChanges: Identifier;
  readonly parkedKeys: Identifier;
  readonly parkedEvents: Identifier;
  readonly consumerVersions: Identifier;
  readonly migrations: Identifier;
}

/**
 * Escaped identifiers for every Sluice table in `schema` (CONVENTIONS.md#sql-and-migrations):
 * queries interpolate these, never strings. postgres.js quotes `schema.table` part by part.
 */
export function tables(sql: Queryable, schema: string): Tables {
  return {
    schema: sql(schema),
    events: eventsTable(sql, schema),
    consumers: sql(`${schema}.consumers`),
    gaps: sql(`${schema}.gaps`),
    turnStarts: sql(`${schema}.turn_starts`),
    deadLetters: sql(`${schema}.dead_letters`),
    audit: sql(`${schema}.audit`),
    laneChanges: sql(`${schema}.lane_changes`),
    parkedKeys: sql(`${schema}.parked_keys`),
    parkedEvents: sql(`${schema}.parked_events`),
    consumerVersions: sql(`${schema}.consumer_versions`),
    migrations: sql(`${schema}.migrations`),
  };
}

/** The events table alone: what append() needs, without building every other identifier per call. */
export function eventsTable(sql: Queryable, schema: string): Identifier {
  return sql(`${schema}.events`);
}

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
  if (schema.startsWith('pg_') || schema === 'information_schema') {
    throw new InvalidOptionError(
      'schema',
      `must not be a schema name PostgreSQL keeps for itself, got "${schema}"`,
    );
  }
  return schema;
}

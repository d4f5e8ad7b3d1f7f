import type { Queryable } from '../sql-types.js';

/**
 * Escaped identifiers for every Sluice table in `schema` (CONVENTIONS.md#sql-and-migrations):
 * queries interpolate these, never strings. postgres.js quotes `schema.table` part by part.
 */
export function tables(sql: Queryable, schema: string) {
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

export type Tables = ReturnType<typeof tables>;

/** The events table alone: what append() needs, without building every other identifier per call. */
export function eventsTable(sql: Queryable, schema: string) {
  return sql(`${schema}.events`);
}

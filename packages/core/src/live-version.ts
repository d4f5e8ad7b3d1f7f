import { notMigratedOr } from './errors.js';
import { checkStorableName, optionsObject, requirePool } from './options.js';
import { liveVersionOf } from './queries/versions.js';
import { resolveSchemaName, tables } from './schema/tables.js';
import type { Queryable } from './sql-types.js';

/**
 * The live version of consumer `name` (docs/design.md §12.3), read with `sql`: pass the
 * transaction your read runs in. Read it and then that version's tables in one REPEATABLE READ
 * transaction and the two agree: a takeover commits in one transaction, so the reader sees the old
 * version live and its data, or the new one and its data. Null when the consumer declares no
 * version (or is not registered).
 * @throws {InvalidOptionError} for a name no consumer can have, before anything is read
 * @throws {SchemaNotMigratedError} when the schema has no Sluice tables
 */
export async function liveVersion(
  sql: Queryable,
  name: string,
  options?: { readonly schema?: string },
): Promise<number | null> {
  requirePool(sql);
  checkStorableName(name, 'name');
  const schema = resolveSchemaName(
    optionsObject(options, { fields: ['schema'], of: 'liveVersion()' }).schema,
  );
  return liveVersionOf(sql, tables(sql, schema), name).catch((error: unknown) => {
    throw notMigratedOr(error, schema);
  });
}

import type postgres from 'postgres';

/**
 * A postgres.js pool: functions taking `sql: Sql` open their own transactions
 * (CONVENTIONS.md#transactions).
 */
export type Sql = postgres.Sql;
/** A postgres.js transaction: functions taking `tx: TransactionSql` run inside the caller's and never commit. */
export type TransactionSql = postgres.TransactionSql;
/**
 * Any of them, a reserved connection too; for read-only helpers that work inside or outside a
 * transaction. (postgres.js 4's ReservedSql is not a Sql, as 3's was.)
 */
export type Queryable = postgres.Sql | postgres.TransactionSql | postgres.ReservedSql;

/** A connection reserved from a pool (`sql.reserve()`): must be released. */
export type ReservedSql = postgres.ReservedSql;

// Declared return types use these names, which postgres.js 3 and 4 both have: a type the compiler
// infers is written into the shipped declarations against the release Sluice is built with
// (`import("postgres").default.Helper`, which 3.4's types do not have).
/** An escaped identifier: `sql('schema.table')`. */
export type Identifier = postgres.Helper<string, []>;
/** A piece of a statement, interpolated into another: `sql\`…\``. */
export type Fragment = postgres.Fragment;

/**
 * The rows of `query` as arrays, in the order of its select list. What Sluice reads through a pool
 * of the application's (`migrate()`, `prune()`, `verifySchema()`, `append()`) is read this way: a
 * transform of column names the pool has (`transform: postgres.camel`, say) renames nothing then.
 */
export async function valuesOf<Row extends readonly unknown[]>(query: {
  values(): PromiseLike<unknown>;
}): Promise<Row[]> {
  return (await query.values()) as Row[];
}

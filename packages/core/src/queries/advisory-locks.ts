import { type TransactionSql, valuesOf } from '../sql-types.js';

/** How long a transaction holding these locks may sit idle before the server ends it. */
const HOLDER_IDLE_MS = 60_000;

/**
 * Runs `take` (statements taking transaction-scoped advisory locks: a migration's, registration's
 * or prune's) with no lock_timeout and no statement_timeout, then restores both for the rest of the
 * transaction. Those waits last as long as the holder's own work (another process's migration, a
 * prune's delete, a registration), which is bounded by itself; a role's or database's short
 * lock_timeout would otherwise fail them with a raw 55P03 (a process starting during a prune did
 * not start). The transaction may then sit idle for at most HOLDER_IDLE_MS (or the role's shorter
 * idle_in_transaction_session_timeout): a holder gone silent does not keep the others waiting.
 */
export async function takeAdvisoryLocks(tx: TransactionSql, take: () => Promise<unknown>): Promise<void> {
  const [saved] = await valuesOf<[lockTimeout: string, statementTimeout: string]>(
    tx`select current_setting('lock_timeout'), current_setting('statement_timeout')`,
  );
  // Waiting without a bound is safe only while every holder is working: one that went silent (a
  // frozen process, a lost network) is ended by the server once idle in its transaction this
  // long, and the same is asked of this transaction while it holds these locks.
  await tx`
    select set_config('lock_timeout', '0', true), set_config('statement_timeout', '0', true),
           set_config('idle_in_transaction_session_timeout',
                      (select case when setting::int = 0 then ${HOLDER_IDLE_MS} else least(setting::int, ${HOLDER_IDLE_MS}) end
                       from pg_settings where name = 'idle_in_transaction_session_timeout')::text, true)`;
  await take();
  if (saved) {
    await tx`select set_config('lock_timeout', ${saved[0]}, true),
                    set_config('statement_timeout', ${saved[1]}, true)`;
  }
}

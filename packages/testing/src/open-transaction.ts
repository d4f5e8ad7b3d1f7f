import { append, type EventRecord, type NewEvent, type Sql, type TransactionSql } from '@sluice/core';
import type postgres from 'postgres';

export interface OpenTransaction {
  /** Backend pid of the transaction's connection. */
  readonly pid: number;
  /** The connection, inside the open transaction: run any statement on it. */
  readonly sql: postgres.ReservedSql;
  /** Assigns (if needed) and returns the transaction's xid. */
  xid(): Promise<bigint>;
  /** Appends inside the open transaction. */
  append(events: readonly NewEvent[], options?: { schema?: string }): Promise<EventRecord[]>;
  commit(): Promise<void>;
  rollback(): Promise<void>;
}

/**
 * Opens a transaction on a reserved connection of `sql` and keeps it open until commit() or
 * rollback(), so a test can interleave it with other sessions statement by statement.
 */
export async function openTransaction(sql: Sql): Promise<OpenTransaction> {
  // postgres.js 3.4.9: on a pool that has not opened a connection yet, reserve() never settles when
  // fetch_types is false (porsager/postgres#751). A statement first opens one for it to take.
  await sql`select 1`;
  const reserved = await sql.reserve();
  await reserved`begin`;
  const [row] = await reserved<{ pid: number }[]>`select pg_backend_pid() as pid`;
  let done = false;
  const finish = async (statement: 'commit' | 'rollback') => {
    if (done) return;
    done = true;
    try {
      await (statement === 'commit' ? reserved`commit` : reserved`rollback`);
    } finally {
      reserved.release();
    }
  };
  return {
    pid: row?.pid ?? 0,
    sql: reserved,
    async xid() {
      const [x] = await reserved<{ xid: string }[]>`select pg_current_xact_id()::text as xid`;
      return BigInt(x?.xid ?? '0');
    },
    append: (events, options = {}) => append(reserved as unknown as TransactionSql, events, options),
    commit: () => finish('commit'),
    rollback: () => finish('rollback'),
  };
}

export interface HeldGap {
  /** The event id the open transaction owns: a gap until it commits or rolls back. */
  readonly id: bigint;
  readonly transaction: OpenTransaction;
  /** Ends the transaction: commit makes the event visible (a late commit), rollback leaves a hole for good. */
  release(options: { commit: boolean }): Promise<void>;
}

/**
 * Opens a transaction that owns one event id and keeps it open, so handlers can be tested around
 * gaps: events appended after it are visible first, and its own becomes visible (or never does)
 * on release.
 */
export async function holdGap(
  sql: Sql,
  event?: NewEvent,
  options: { schema?: string } = {},
): Promise<HeldGap> {
  const transaction = await openTransaction(sql);
  const [stored] = await transaction.append(
    [event ?? { streamId: 'held-gap', type: 'HeldGap', data: {} }],
    options,
  );
  if (!stored) throw new Error('holdGap: append returned nothing');
  return {
    id: stored.id,
    transaction,
    release: ({ commit }) => (commit ? transaction.commit() : transaction.rollback()),
  };
}

import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import type postgres from 'postgres';

let clockTicks: number | undefined;

function ticksPerSecond(): number {
  if (clockTicks === undefined) {
    try {
      clockTicks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      clockTicks = 100;
    }
  }
  return clockTicks;
}

/**
 * CPU time (ms) used so far by a PostgreSQL server running on this machine: the postmaster, its
 * live children (backends, checkpointer, WAL writer, …) and, through the postmaster's cutime, the
 * children that have exited. Undefined when the server is not local (DATABASE_URL) or /proc is missing.
 * A live process is read from /proc/<pid>/schedstat (nanoseconds on the CPU) where the kernel has
 * it: /proc/<pid>/stat counts 10 ms clock ticks, too coarse for an idle server's fraction of a
 * percent spread over a dozen processes.
 */
export function postgresCpuMs(postmasterPid: number | undefined): number | undefined {
  if (postmasterPid === undefined) return undefined;
  let ms = 0;
  let found = false;
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return undefined;
  }
  const tickMs = 1000 / ticksPerSecond();
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // exited meanwhile
    }
    // The command name may contain spaces: the numeric fields start after its closing parenthesis.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const pid = Number(entry);
    const ppid = Number(fields[1]);
    if (pid !== postmasterPid && ppid !== postmasterPid) continue;
    const ownMs = runtimeMs(entry) ?? (Number(fields[11]) + Number(fields[12])) * tickMs;
    if (pid === postmasterPid) {
      found = true;
      ms += ownMs + (Number(fields[13]) + Number(fields[14])) * tickMs;
    } else {
      ms += ownMs;
    }
  }
  return found ? ms : undefined;
}

/** Time on the CPU of a live process, from schedstat (ns); undefined where the kernel lacks it. */
function runtimeMs(pid: string): number | undefined {
  try {
    const ns = Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]);
    return Number.isFinite(ns) ? ns / 1e6 : undefined;
  } catch {
    return undefined;
  }
}

/** This Node process's CPU time (user + system) in ms. */
export function nodeCpuMs(): number {
  const usage = process.cpuUsage();
  return (usage.user + usage.system) / 1000;
}

export interface DbCounters {
  /** pg_stat_statements calls in the measured database (undefined without the extension). */
  readonly statements: number | undefined;
  /** Bytes of WAL the whole cluster has written. */
  readonly walBytes: number;
  /** Next transaction id: the difference counts transactions that wrote (got an xid), cluster-wide. */
  readonly nextXid: bigint;
  readonly xactCommit: number;
}

/** Cumulative database-side counters, read from the admin connection (not counted: another database). */
export async function dbCounters(admin: postgres.Sql, dbOid: number, pgss: boolean): Promise<DbCounters> {
  const [row] = await admin<{ wal: string; xid: string; commits: string }[]>`
    select pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::text as wal,
           pg_snapshot_xmax(pg_current_snapshot())::text as xid,
           (select xact_commit from pg_stat_database where datid = ${dbOid})::text as commits`;
  let statements: number | undefined;
  if (pgss) {
    const [s] = await admin<{ calls: string }[]>`
      select coalesce(sum(calls), 0)::text as calls from pg_stat_statements where dbid = ${dbOid}`;
    statements = Number(s?.calls ?? 0);
  }
  return {
    statements,
    walBytes: Number(row?.wal ?? 0),
    nextXid: BigInt(row?.xid ?? 0),
    xactCommit: Number(row?.commits ?? 0),
  };
}

export interface StatementProfileRow {
  readonly query: string;
  readonly calls: number;
  readonly totalMs: number;
  /** Rows returned or affected, over all calls. */
  readonly rows: number;
}

/** The measured database's statements by total execution time (pg_stat_statements), for RESULTS.md. */
export async function statementProfile(
  admin: postgres.Sql,
  dbOid: number,
  limit = 12,
): Promise<StatementProfileRow[]> {
  const rows = await admin<{ query: string; calls: string; total: number; rows: string }[]>`
    select regexp_replace(s.query, '\\s+', ' ', 'g') as query, s.calls::text as calls,
           s.total_exec_time as total, s.rows::text as rows
    from pg_stat_statements s where s.dbid = ${dbOid}
    order by s.calls desc, s.total_exec_time desc limit ${limit}`;
  return rows.map((r) => ({
    query: r.query,
    calls: Number(r.calls),
    totalMs: r.total,
    rows: Number(r.rows),
  }));
}

/** Measures CPU (Node and PostgreSQL) and database counters between start() and stop(). */
export class Meter {
  #startWall = 0;
  #startNode = 0;
  #startPg: number | undefined;
  #startDb: DbCounters | undefined;

  readonly #admin: postgres.Sql;
  readonly #dbOid: number;
  readonly #pgss: boolean;
  readonly #postmasterPid: number | undefined;

  constructor(admin: postgres.Sql, dbOid: number, pgss: boolean, postmasterPid: number | undefined) {
    this.#admin = admin;
    this.#dbOid = dbOid;
    this.#pgss = pgss;
    this.#postmasterPid = postmasterPid;
  }

  async start(): Promise<void> {
    // The database's statement statistics cover the measured window alone (statementProfile); the
    // counters below are differences, which the reset does not disturb.
    if (this.#pgss) await this.#admin`select pg_stat_statements_reset(0, ${this.#dbOid}::oid, 0)`;
    this.#startDb = await dbCounters(this.#admin, this.#dbOid, this.#pgss);
    this.#startPg = postgresCpuMs(this.#postmasterPid);
    this.#startNode = nodeCpuMs();
    this.#startWall = performance.now();
  }

  /** Call right when the measured work ends; the database counters are read after. */
  async stop(): Promise<Measurement> {
    const wallMs = performance.now() - this.#startWall;
    const nodeMs = nodeCpuMs() - this.#startNode;
    const pgNow = postgresCpuMs(this.#postmasterPid);
    const db = await dbCounters(this.#admin, this.#dbOid, this.#pgss);
    const before = this.#startDb;
    if (!before) throw new Error('Meter.stop() before start()');
    return {
      startedAt: this.#startWall,
      wallMs,
      nodeCpuPercent: (100 * nodeMs) / wallMs,
      pgCpuPercent:
        pgNow === undefined || this.#startPg === undefined
          ? undefined
          : (100 * (pgNow - this.#startPg)) / wallMs,
      statements:
        db.statements === undefined || before.statements === undefined
          ? undefined
          : db.statements - before.statements,
      walBytes: db.walBytes - before.walBytes,
      writeTransactions: Number(db.nextXid - before.nextXid),
      commits: db.xactCommit - before.xactCommit,
    };
  }
}

export interface Measurement {
  /** performance.now() when the measurement started. */
  readonly startedAt: number;
  readonly wallMs: number;
  /** % of one core. */
  readonly nodeCpuPercent: number;
  /** % of one core; undefined when the server is not local. */
  readonly pgCpuPercent: number | undefined;
  readonly statements: number | undefined;
  readonly walBytes: number;
  /** Transactions that were assigned an xid (wrote something), cluster-wide. */
  readonly writeTransactions: number;
  /** pg_stat_database.xact_commit delta (flushed by backends at most once a second: approximate). */
  readonly commits: number;
}

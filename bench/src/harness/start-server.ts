import { embeddedServer } from '@sluice/testing';

// Only the orchestrator (main.ts) starts the server; scenario processes connect to it.

/**
 * Settings of the embedded server for benchmarking. Durability stays as in production (fsync,
 * synchronous_commit and full_page_writes on: a commit waits for its WAL flush, which is what an
 * application pays); the rest removes noise that has nothing to do with the code measured.
 */
export const BENCH_SETTINGS: Readonly<Record<string, string>> = {
  fsync: 'on',
  synchronous_commit: 'on',
  full_page_writes: 'on',
  // The 1M-event log (~1.3 GB) mostly fits; reads come from shared buffers or the OS page cache.
  shared_buffers: '1GB',
  // No checkpoint inside a measurement: each run starts on a database cloned with a checkpoint.
  max_wal_size: '8GB',
  checkpoint_timeout: '30min',
  // Loads are followed by an explicit VACUUM ANALYZE; an autovacuum worker starting mid-run is noise.
  autovacuum: 'off',
  jit: 'off',
  // Statement counts per batch / per idle tick, exact and per database.
  shared_preload_libraries: 'pg_stat_statements',
  'pg_stat_statements.track': 'top',
  'pg_stat_statements.max': '10000',
  max_connections: '300',
};

export interface BenchServer {
  readonly url: string;
  readonly source: 'embedded' | 'DATABASE_URL';
  /** The postmaster's pid when it runs on this machine (embedded): its CPU is measured through /proc. */
  readonly postmasterPid: number | undefined;
  stop(): Promise<void>;
}

/** DATABASE_URL when set (its server's settings are used as they are), else embedded PostgreSQL. */
export async function startServer(): Promise<BenchServer> {
  const url = process.env['DATABASE_URL'];
  if (url !== undefined && url !== '') {
    return { url, source: 'DATABASE_URL', postmasterPid: undefined, stop: () => Promise.resolve() };
  }
  const server = await embeddedServer({ settings: BENCH_SETTINGS });
  return {
    url: server.url,
    source: 'embedded',
    postmasterPid: server.postmasterPid,
    stop: () => server.stop(),
  };
}

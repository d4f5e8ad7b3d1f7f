import type { Logger, Sql } from '@sluice/core';

/** A line a {@link capturingLogger} kept: its level, message and fields, and when (performance.now()). */
export interface CapturedLine {
  readonly level: 'debug' | 'info' | 'warn' | 'error';
  readonly message: string;
  readonly fields: Record<string, unknown>;
  readonly at: number;
}

/** A logger that keeps every line, so a test can assert on the warnings and errors a dispatcher logs. */
export function capturingLogger(): Logger & { readonly lines: CapturedLine[] } {
  const lines: CapturedLine[] = [];
  const keep = (level: CapturedLine['level']) => (fields: object, message: string) => {
    lines.push({ level, message, fields: fields as Record<string, unknown>, at: performance.now() });
  };
  return { lines, debug: keep('debug'), info: keep('info'), warn: keep('warn'), error: keep('error') };
}

/** The backends of the dispatchers' LISTEN connections to the current database. */
export async function listenBackends(sql: Sql): Promise<number[]> {
  const rows = await sql<{ pid: number }[]>`
    select pid from pg_stat_activity
    where datname = current_database() and application_name like 'sluice-listen%'`;
  return rows.map((r) => r.pid);
}

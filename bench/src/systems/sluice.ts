import { createDispatcher, type Consumer, type DispatcherOptions, type Logger } from '@sluice/core';
import postgres from 'postgres';
import type { BenchPayload } from '../harness/payload.js';
import type { DeliveryTracker } from '../harness/tracker.js';

/** Sluice's warnings and errors reach stderr (a benchmark must not hide them); info and debug do not. */
export const benchLogger: Logger = {
  debug: () => undefined,
  info: () => undefined,
  warn: (fields, message) => {
    process.stderr.write(`[sluice warn] ${message} ${JSON.stringify(fields, bigintSafe)}\n`);
  },
  error: (fields, message) => {
    process.stderr.write(`[sluice error] ${message} ${JSON.stringify(fields, bigintSafe)}\n`);
  },
};

function bigintSafe(_key: string, value: unknown): unknown {
  return typeof value === 'bigint' ? value.toString() : value;
}

export function pool(
  url: string,
  max: number,
  extra: postgres.Options<Record<string, postgres.PostgresType>> = {},
): postgres.Sql {
  return postgres(url, { max, onnotice: () => undefined, ...extra });
}

export function consumerName(index: number): string {
  return `c${String(index).padStart(3, '0')}`;
}

/**
 * `count` no-op consumers that only record each delivery's seq (c000, c001, …), each run as
 * `lanes` lanes when given.
 */
export function benchConsumers(
  count: number,
  onDelivery: (consumer: number, seq: number) => void,
  options: { readonly lanes?: number } = {},
): Consumer[] {
  return Array.from({ length: count }, (_, index) => ({
    name: consumerName(index),
    ...(options.lanes === undefined ? {} : { lanes: options.lanes }),
    handler: (event) => {
      onDelivery(index, (event.data as { seq: number }).seq);
    },
  }));
}

export function trackingConsumers(
  count: number,
  tracker: DeliveryTracker,
  options: { readonly lanes?: number } = {},
): Consumer[] {
  return benchConsumers(
    count,
    (consumer, seq) => {
      tracker.record(consumer, seq);
    },
    options,
  );
}

/** The rebuild scenario's versioned projection (docs/design.md §12): its rows are 'stats' and 'stats@v<N>'. */
export const STATS_CONSUMER = 'stats';

/** The table version `version` of the stats projection writes: bench.proj_v<N>. */
export function statsTable(version: number): string {
  return `bench.proj_v${version}`;
}

/**
 * Version `version` of a transactional projection writing one row per event into its own table
 * (statsTable) through ctx.tx, the catch-up case's row (event id, order id, total) and statement
 * (INSERT … ON CONFLICT DO NOTHING). `onDelivery` runs first in the handler.
 */
export function statsProjection(
  version: number,
  onDelivery: (seq: number) => void,
  extra: Partial<Consumer> = {},
): Consumer {
  return {
    name: STATS_CONSUMER,
    version,
    transactional: true,
    handler: (event, context) => {
      const data = event.data as BenchPayload;
      onDelivery(data.seq);
      if (!context.tx) throw new Error('a transactional consumer is given ctx.tx');
      if (context.version !== version)
        throw new Error(`version ${version} called as ${String(context.version)}`);
      return context.tx`
        insert into ${context.tx(statsTable(context.version))} (event_id, order_id, total_cents)
        values (${event.id.toString()}::bigint, ${data.orderId}, ${data.totalCents})
        on conflict (event_id) do nothing`;
    },
    ...extra,
  };
}

export function benchDispatcher(
  sql: postgres.Sql,
  consumers: Consumer[],
  options: Partial<Omit<DispatcherOptions, 'sql' | 'consumers'>> = {},
) {
  return createDispatcher({ sql, consumers, logger: benchLogger, ...options });
}

import { createDispatcher, type Consumer, type DispatcherOptions, type Logger } from '@sluice/core';
import postgres from 'postgres';
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

export function benchDispatcher(
  sql: postgres.Sql,
  consumers: Consumer[],
  options: Partial<Omit<DispatcherOptions, 'sql' | 'consumers'>> = {},
) {
  return createDispatcher({ sql, consumers, logger: benchLogger, ...options });
}

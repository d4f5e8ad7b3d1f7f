import type { Consumer, EventRecord } from '@sluice/core';
import { asShopEvent } from '../events.js';

/** Attempts on one event before `order-stats` turns dead. */
export const ORDER_STATS_MAX_ATTEMPTS = 3;

/**
 * A transactional projection: its counters are written through the turn's transaction, so they
 * commit exactly when the consumer's cursor does (exactly-once effects in the same database).
 *
 * It never skips an event on its own (no `skipApplyErrors`): /stats would silently be wrong. An
 * event it cannot read fails the same way on every attempt (database failures are retried by the
 * dispatcher without counting), so after a few attempts it turns dead and waits for an operator to
 * decide, for example to skip that event. The amounts are checked before they are added: a
 * malformed one stops the projection with a message that names the event and the field.
 */
export function orderStats(version: OrderStatsVersion = 1): Consumer {
  return {
    name: 'order-stats',
    // Versioned (docs/design.md §12): version 2 adds net_revenue_cents. Declared beside version 1
    // (DEMO_ORDER_STATS_V2=1), it is rebuilt from the beginning of the log into its own table
    // while version 1 serves /stats, until an operator approves its takeover.
    version,
    transactional: true,
    errorPolicy: { maxAttempts: ORDER_STATS_MAX_ATTEMPTS },
    handler: async (event, ctx) => {
      const tx = ctx.tx;
      const shop = asShopEvent(event);
      if (!tx || !shop) return;
      const table = tx(orderStatsTable(version));
      const bump = (name: string, by: number) =>
        tx`update ${table} set value = value + ${String(by)}::bigint where name = ${name}`;
      switch (shop.type) {
        case 'OrderPlaced':
          await bump('placed', 1);
          break;
        case 'OrderPaid': {
          const amount = cents(event, 'amountCents', shop.data.amountCents);
          await bump('paid', 1);
          await bump('revenue_cents', amount);
          if (version === 2) await bump('net_revenue_cents', amount);
          break;
        }
        case 'OrderCancelled': {
          const refund = shop.data.wasPaid ? cents(event, 'totalCents', shop.data.totalCents) : 0;
          await bump('cancelled', 1);
          if (refund > 0) await bump('refunded_cents', refund);
          if (version === 2 && refund > 0) await bump('net_revenue_cents', -refund);
          break;
        }
      }
    },
  };
}

export type OrderStatsVersion = 1 | 2;

/** The read model of each version of `order-stats`. */
export function orderStatsTable(version: number): string {
  return version === 2 ? 'shop.order_stats_v2' : 'shop.order_stats';
}

function cents(event: EventRecord, field: string, value: unknown): number {
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return value;
  throw new Error(
    `${event.type} event ${event.id} (${event.streamId}): ${field} is ${JSON.stringify(value)}, ` +
      'not a whole number of cents',
  );
}

import type { Consumer } from '@sluice/core';
import { asShopEvent } from '../events.js';

/**
 * A transactional projection: its counters are written through the turn's transaction, so they
 * commit exactly when the consumer's cursor does (exactly-once effects in the same database).
 */
export function orderStats(): Consumer {
  return {
    name: 'order-stats',
    transactional: true,
    handler: async (event, ctx) => {
      const tx = ctx.tx;
      const shop = asShopEvent(event);
      if (!tx || !shop) return;
      const bump = (name: string, by: number | string) =>
        tx`update shop.order_stats set value = value + ${String(by)}::bigint where name = ${name}`;
      switch (shop.type) {
        case 'OrderPlaced':
          await bump('placed', 1);
          break;
        case 'OrderPaid':
          await bump('paid', 1);
          await bump('revenue_cents', shop.data.amountCents);
          break;
        case 'OrderCancelled':
          await bump('cancelled', 1);
          if (shop.data.wasPaid) await bump('refunded_cents', shop.data.totalCents);
          break;
      }
    },
  };
}

import type { Consumer, EventRecord } from '@sluice/core';
import { asShopEvent } from '../events.js';

export interface IndexedOrder {
  orderId: string;
  customer: string;
  skus: string[];
  status: string;
}

/**
 * A search indexer with a `batchHandler`: a whole batch becomes one bulk update of the (here
 * in-memory) index. Should the bulk call throw, Sluice re-delivers the batch one event at a time.
 */
export function searchIndex() {
  const documents = new Map<string, IndexedOrder>();
  const apply = (event: EventRecord) => {
    const shop = asShopEvent(event);
    if (!shop) return;
    if (shop.type === 'OrderPlaced') {
      documents.set(shop.data.orderId, {
        orderId: shop.data.orderId,
        customer: shop.data.customer,
        skus: shop.data.items.map((i) => i.sku),
        status: 'placed',
      });
    } else {
      const doc = documents.get(shop.data.orderId);
      if (doc) doc.status = shop.type === 'OrderPaid' ? 'paid' : 'cancelled';
    }
  };
  const consumer: Consumer = {
    name: 'search-index',
    batchSize: 500,
    batchHandler: (events) => {
      for (const event of events) apply(event);
    },
    handler: apply,
  };
  return {
    consumer,
    search(term: string): IndexedOrder[] {
      const needle = term.toLowerCase();
      return [...documents.values()].filter(
        (d) =>
          d.customer.toLowerCase().includes(needle) || d.skus.some((s) => s.toLowerCase().includes(needle)),
      );
    },
    size: () => documents.size,
  };
}

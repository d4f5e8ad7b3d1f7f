import type { EventRecord } from '@sluice/core';

/** The shop's events (stream `order-<id>`). */
export interface OrderPlaced {
  orderId: string;
  customer: string;
  items: { sku: string; quantity: number; priceCents: number }[];
  totalCents: number;
}
export interface OrderPaid {
  orderId: string;
  amountCents: number;
}
export interface OrderCancelled {
  orderId: string;
  reason: string;
  wasPaid: boolean;
  totalCents: number;
}

export type ShopEvent =
  | { type: 'OrderPlaced'; data: OrderPlaced }
  | { type: 'OrderPaid'; data: OrderPaid }
  | { type: 'OrderCancelled'; data: OrderCancelled };

/** Narrows a stored event to the shop's union (events of other apps are ignored by callers). */
export function asShopEvent(event: EventRecord): ShopEvent | undefined {
  switch (event.type) {
    case 'OrderPlaced':
      return { type: 'OrderPlaced', data: event.data as unknown as OrderPlaced };
    case 'OrderPaid':
      return { type: 'OrderPaid', data: event.data as unknown as OrderPaid };
    case 'OrderCancelled':
      return { type: 'OrderCancelled', data: event.data as unknown as OrderCancelled };
    default:
      return undefined;
  }
}

import type { Consumer } from '@sluice/core';
import { asShopEvent } from '../events.js';

export interface SentMail {
  readonly to: string;
  readonly subject: string;
  readonly eventId: string;
}

/**
 * A fake mail transport: it "sends" into a list, and refuses addresses matching `bounce`, the way a
 * provider refuses a dead mailbox. Such an order makes the `mailer` consumer retry, then die — an
 * operator skips the event (dashboard, CLI or ops route) and it recovers.
 */
export function fakeMailTransport(bounce: RegExp) {
  const sent: SentMail[] = [];
  return {
    sent,
    send(mail: SentMail): void {
      if (bounce.test(mail.to)) throw new Error(`550 mailbox unavailable: ${mail.to}`);
      sent.push(mail);
    },
  };
}

/** A reactor: an e-mail per order event. Retries 3 times, then dies on a permanent failure. */
export function mailer(
  transport: ReturnType<typeof fakeMailTransport>,
  orderCustomer: (orderId: string) => Promise<string | undefined>,
): Consumer {
  return {
    name: 'mailer',
    errorPolicy: { maxAttempts: 3 },
    handler: async (event) => {
      const shop = asShopEvent(event);
      if (!shop) return;
      const to = shop.type === 'OrderPlaced' ? shop.data.customer : await orderCustomer(shop.data.orderId);
      if (to === undefined) return;
      const subject =
        shop.type === 'OrderPlaced'
          ? `Order ${shop.data.orderId} received`
          : shop.type === 'OrderPaid'
            ? `Payment for order ${shop.data.orderId} confirmed`
            : `Order ${shop.data.orderId} cancelled`;
      transport.send({ to, subject, eventId: event.id.toString() });
    },
  };
}

import { createHash } from 'node:crypto';
import type { Consumer } from '@sluice/core';
import { asShopEvent } from '../events.js';

export interface SentMail {
  readonly to: string;
  readonly subject: string;
  readonly eventId: string;
}

/**
 * The fake provider's refusal, worded as an SMTP reply. `permanent` (a 5xx reply) means retrying
 * cannot help; a transient one (4xx) means "try again later".
 */
export class MailRefusedError extends Error {
  readonly replyCode: number;
  readonly permanent: boolean;

  constructor(replyCode: number, text: string) {
    super(`${replyCode} ${text}`);
    this.name = 'MailRefusedError';
    this.replyCode = replyCode;
    this.permanent = replyCode >= 500;
  }
}

export interface RefusedMail extends SentMail {
  readonly reply: string;
  readonly permanent: boolean;
}

export interface MailTransportOptions {
  /**
   * Addresses that do not exist. Every delivery to them is refused for good with
   * `550 5.1.1 … mailbox does not exist` (a hard bounce): the same answer on every attempt.
   */
  readonly bounce: RegExp;
  /**
   * Share (0–1) of addresses the provider greylists: the first delivery to such an address is
   * deferred with `451 4.7.1 … greylisted, try again later`, and the next one goes through. Which
   * addresses are greylisted follows from a hash of the address, so it is the same on every run.
   * @defaultValue 0.1
   */
  readonly greylistShare?: number;
}

/**
 * A fake mail provider that refuses mail the way real ones do: permanently for addresses that do
 * not exist (hard bounces, deterministic per address), transiently for a first delivery it
 * greylists (the retry succeeds). It "sends" into a list.
 */
export function fakeMailTransport(options: MailTransportOptions) {
  const greylistShare = options.greylistShare ?? 0.1;
  const sent: SentMail[] = [];
  const refused: RefusedMail[] = [];
  // Addresses that were deferred once: the provider lets their next delivery through, as a
  // greylisting server does for a sender that came back.
  const cameBack = new Set<string>();
  const refuse = (mail: SentMail, error: MailRefusedError): never => {
    refused.push({ ...mail, reply: error.message, permanent: error.permanent });
    throw error;
  };
  return {
    sent,
    refused,
    send(mail: SentMail): void {
      const address = mail.to.toLowerCase();
      if (options.bounce.test(mail.to)) {
        refuse(mail, new MailRefusedError(550, `5.1.1 <${mail.to}>: mailbox does not exist (hard bounce)`));
      }
      if (!cameBack.has(address) && hashShare(address) < greylistShare) {
        cameBack.add(address);
        refuse(mail, new MailRefusedError(451, `4.7.1 <${mail.to}>: greylisted, try again later`));
      }
      sent.push(mail);
    },
  };
}

export type MailTransport = ReturnType<typeof fakeMailTransport>;

/** A number in [0, 1) fixed by the address. */
function hashShare(address: string): number {
  return createHash('sha256').update(address).digest().readUInt32BE(0) / 2 ** 32;
}

/**
 * Attempts on one mail before the mailer gives up on it. A transient refusal is retried after the
 * dispatcher's retry delay (100 ms, then 200 ms) and normally goes through on the next attempt. A
 * hard bounce is not retried at all: its error policy calls it permanent (see mailer()).
 */
export const MAILER_MAX_ATTEMPTS = 3;

/**
 * A reactor: an e-mail per order event, through a provider that can refuse it. Its error policy is
 * the one a mailer needs: a transient refusal (4xx) is retried (the consumer's normal retry, with
 * its delay); a permanent one (5xx, a hard bounce: the address does not exist) cannot succeed on a
 * retry, so `isPermanent` sends it to the consumer's dead letters on its first refusal, with the
 * provider's answer, and the customers after it are not held up by retries. A transient refusal
 * that still fails after MAILER_MAX_ATTEMPTS lands there too (against a real provider, an outage
 * longer than the retries). An operator reads the bounces there and replays them once the
 * addresses are fixed.
 */
export function mailer(
  transport: MailTransport,
  orderCustomer: (orderId: string) => Promise<string | undefined>,
): Consumer {
  return {
    name: 'mailer',
    errorPolicy: {
      maxAttempts: MAILER_MAX_ATTEMPTS,
      skipApplyErrors: true,
      isPermanent: (error) => error instanceof MailRefusedError && error.permanent,
    },
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

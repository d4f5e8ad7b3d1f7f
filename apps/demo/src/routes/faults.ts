import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';

/** The amount a faulty release wrote: text with a decimal comma instead of a number of cents. */
export const POISON_AMOUNT = '4,50';

/**
 * Fault injection for the tour: `POST /demo/poison` appends one poison event, an `OrderPaid` as a
 * faulty release of the shop could have written it, with its amount as text. Only `order-stats`
 * reads the amount: it fails on this event every time and turns dead, while the other consumers go
 * on (the mailer and the search index find no order of that id and let it pass).
 */
export function faultRoutes(app: FastifyInstance): void {
  app.post('/demo/poison', async (_request, reply) => {
    const orderId = randomUUID();
    const streamId = `order-${orderId}`;
    const data = { orderId, amountCents: POISON_AMOUNT };
    const [event] = await app.sluice.transaction((tx) =>
      app.sluice.append(tx, [
        {
          streamId,
          type: 'OrderPaid',
          data,
          metadata: { writtenBy: 'demo fault injection (POST /demo/poison)' },
        },
      ]),
    );
    return reply.code(201).send({ eventId: event?.id.toString(), type: 'OrderPaid', streamId, data });
  });
}

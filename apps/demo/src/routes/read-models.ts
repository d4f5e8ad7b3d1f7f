import type { FastifyInstance } from 'fastify';
import type { MailTransport } from '../consumers/mailer.js';
import type { searchIndex } from '../consumers/search-index.js';

/** The read side: each served by one consumer's read model. */
export function readModelRoutes(
  app: FastifyInstance,
  models: { search: ReturnType<typeof searchIndex>; mails: MailTransport },
): void {
  // order-stats: a table written in the consumer's transaction.
  app.get('/stats', async () => {
    const rows = await app.sluice.dispatcher.sql<
      { name: string; value: string }[]
    >`select name, value::text from shop.order_stats`;
    return Object.fromEntries(rows.map((r) => [r.name, Number(r.value)]));
  });

  // search-index: in memory, fed by a batchHandler.
  app.get<{ Querystring: { q: string } }>('/search', {
    schema: {
      querystring: {
        type: 'object',
        properties: { q: { type: 'string', minLength: 1, maxLength: 100 } },
        required: ['q'],
      },
    },
    handler: (request) => ({
      results: models.search.search(request.query.q).slice(0, 50),
      indexed: models.search.size(),
    }),
  });

  // mailer: what the fake provider "sent", and what it refused (each refusal is one attempt).
  app.get('/mails', () => ({
    sent: models.mails.sent.length,
    refused: models.mails.refused.length,
    last: models.mails.sent.slice(-20),
    lastRefused: models.mails.refused.slice(-20),
  }));
}

import { liveVersion } from '@sluice/core';
import type { FastifyInstance } from 'fastify';
import { orderStatsTable } from '../consumers/order-stats.js';
import type { MailTransport } from '../consumers/mailer.js';
import type { searchIndex } from '../consumers/search-index.js';

/** The read side: each served by one consumer's read model. */
export function readModelRoutes(
  app: FastifyInstance,
  models: { search: ReturnType<typeof searchIndex>; mails: MailTransport },
): void {
  // order-stats: a table written in the consumer's transaction, one per version. The live version
  // and its table are read in one REPEATABLE READ transaction: a takeover commits at once, so a
  // request sees version 1 and its counters or version 2 and its, never a version half built.
  app.get('/stats', async (_request, reply) => {
    const { version, rows } = await app.sluice.dispatcher.sql.begin(
      'isolation level repeatable read',
      async (tx) => {
        const live = (await liveVersion(tx, 'order-stats')) ?? 1;
        return {
          version: live,
          rows: await tx<{ name: string; value: string }[]>`
            select name, value::text from ${tx(orderStatsTable(live))}`,
        };
      },
    );
    void reply.header('x-order-stats-version', String(version));
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

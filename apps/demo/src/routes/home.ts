import type { FastifyInstance } from 'fastify';

/** A plain index of what the demo serves. */
export function homeRoutes(app: FastifyInstance, opsPrefix: string): void {
  app.get('/', (_request, reply) =>
    reply.type('text/html; charset=utf-8').send(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sluice demo shop</title></head>
<body>
<h1>Sluice demo shop</h1>
<p>Orders go in with <code>POST /orders</code>; consumers project, index, mail and stream them.</p>
<ul>
  <li><a href="${opsPrefix}/">Ops dashboard</a> (user <code>ops</code>, the password printed at start)</li>
  <li><a href="/stats">/stats</a> — the <code>order-stats</code> transactional projection</li>
  <li><a href="/feed">/feed</a> — Server-Sent Events from the per-instance <code>live-feed</code> consumer</li>
  <li><a href="/search?q=SKU">/search?q=…</a> — the <code>search-index</code> consumer (batch handler)</li>
  <li><a href="/mails">/mails</a> — what the <code>mailer</code> reactor sent, and what the mail provider refused</li>
  <li><a href="/metrics">/metrics</a> — Prometheus metrics</li>
  <li><code>POST /demo/poison</code> — appends a malformed <code>OrderPaid</code> that <code>order-stats</code> cannot read</li>
</ul>
</body></html>`),
  );
}

import { basicAuth, type RedactInput } from '@sluice/fastify';
import sluice from '@sluice/fastify';
import type { Sql } from '@sluice/core';
import Fastify, { type FastifyInstance } from 'fastify';
import { liveFeed } from './consumers/live-feed.js';
import { fakeMailTransport, mailer, type MailTransport } from './consumers/mailer.js';
import { orderStats } from './consumers/order-stats.js';
import { searchIndex } from './consumers/search-index.js';
import { demoLogger } from './log.js';
import { faultRoutes } from './routes/faults.js';
import { feedRoutes } from './routes/feed.js';
import { homeRoutes } from './routes/home.js';
import { orderRoutes } from './routes/orders.js';
import { readModelRoutes } from './routes/read-models.js';
import { createShopSchema } from './shop-schema.js';
import { createMetrics, createTracing } from './telemetry.js';

export interface DemoOptions {
  sql: Sql;
  /** This process's id (per-instance consumers). */
  instanceId: string;
  /** Addresses that do not exist: the fake mail provider refuses them for good (a hard bounce). */
  bounce: RegExp;
  /**
   * Share of addresses whose first delivery the fake mail provider defers (greylisting).
   * @defaultValue 0.1
   */
  greylistShare?: number;
  /** Password of the `ops` user for the dashboard and ops routes. */
  opsPassword: string;
  traces?: boolean;
  /**
   * Fastify's JSON log (requests, and everything Sluice logs). Off: Sluice's notable messages go
   * to `logLine` instead, one plain line each (see demoLogger). @defaultValue false
   */
  logger?: boolean;
  /** Where Sluice's lines go while `logger` is off. @defaultValue console.log */
  logLine?: (line: string) => void;
  pollIntervalMs?: number;
  /**
   * Also run version 2 of `order-stats` (docs/design.md §12): it is rebuilt beside version 1 until
   * an operator approves its takeover (dashboard, `sluice rebuild approve order-stats`).
   * @defaultValue false
   */
  orderStatsV2?: boolean;
}

export const OPS_PREFIX = '/sluice';

/**
 * What operators see of an order's payload in the dashboard and the ops routes (stuck events, dead
 * letters): the customer's address with its local part cut to one letter, `b…@example.com`.
 */
export function hideCustomerAddresses(event: RedactInput): { data: unknown; metadata: unknown } {
  const customer = event.data['customer'];
  if (typeof customer !== 'string') return { data: event.data, metadata: event.metadata };
  const at = customer.lastIndexOf('@');
  const hidden = at > 0 ? `${customer.slice(0, 1)}…${customer.slice(at)}` : '…';
  return { data: { ...event.data, customer: hidden }, metadata: event.metadata };
}

/** The demo shop: its routes, its four consumers and the Sluice plugin with ops routes and metrics. */
export async function buildApp(options: DemoOptions): Promise<{
  app: FastifyInstance;
  mails: MailTransport;
  search: ReturnType<typeof searchIndex>;
  feed: ReturnType<typeof liveFeed>;
}> {
  const app = Fastify({ logger: options.logger ?? false, routerOptions: { maxParamLength: 256 } });
  await createShopSchema(options.sql);
  const metrics = createMetrics(options.instanceId);
  const tracing = createTracing(options.traces ?? false);
  tracing.routes(app);
  const mails = fakeMailTransport({
    bounce: options.bounce,
    ...(options.greylistShare === undefined ? {} : { greylistShare: options.greylistShare }),
  });
  const search = searchIndex();
  const feed = liveFeed();
  const customerOf = async (orderId: string) => {
    const [row] = await options.sql<
      { customer: string }[]
    >`select customer from shop.orders where id = ${orderId}`;
    return row?.customer;
  };

  await app.register(sluice, {
    sql: options.sql,
    instanceId: options.instanceId,
    consumers: [
      orderStats(1),
      ...(options.orderStatsV2 === true ? [orderStats(2)] : []),
      mailer(mails, customerOf),
      search.consumer,
      feed.consumer,
    ],
    meterProvider: metrics.meterProvider,
    // Fastify's logger is off unless DEMO_LOG=1, and Sluice would then log nowhere: a consumer
    // turning dead must still say so on the console.
    logger: options.logger
      ? app.log
      : demoLogger(
          options.logLine ??
            ((line) => {
              console.log(line);
            }),
        ),
    ...(tracing.tracerProvider ? { tracerProvider: tracing.tracerProvider } : {}),
    ...(options.pollIntervalMs === undefined ? {} : { pollIntervalMs: options.pollIntervalMs }),
    ops: {
      prefix: OPS_PREFIX,
      auth: basicAuth({ username: 'ops', password: options.opsPassword }),
      redact: hideCustomerAddresses,
    },
  });
  app.addHook('onClose', () => metrics.shutdown());

  homeRoutes(app, OPS_PREFIX);
  orderRoutes(app);
  faultRoutes(app);
  readModelRoutes(app, { search, mails });
  feedRoutes(app, feed);
  metrics.routes(app);
  return { app, mails, search, feed };
}

import Fastify from 'fastify';
import postgres from 'postgres';
import sluice, { bearerAuth } from '@sluice/fastify';

const sql = postgres(process.env.DATABASE_URL!);

// The app's own tables (a real app creates them in its migrations).
await sql`create table if not exists orders (
  id bigint generated always as identity primary key,
  customer text not null,
  total_cents integer not null
)`;
await sql`create table if not exists order_stats (day date primary key, placed integer not null)`;

// A stand-in for your mail service: a real one awaits its provider's API and throws when that fails.
function sendMail(to: string, text: string): Promise<void> {
  console.log(`mail to ${to}: ${text}`);
  return Promise.resolve();
}

const app = Fastify({ logger: true });

await app.register(sluice, {
  sql,
  consumers: [
    {
      name: 'order-stats',
      transactional: true, // writes through ctx.tx commit atomically with the cursor
      handler: async (event, ctx) => {
        if (event.type !== 'OrderPlaced') return;
        const day = event.createdAt.toISOString().slice(0, 10); // the UTC day it was placed
        await ctx.tx!`insert into order_stats (day, placed) values (${day}, 1)
          on conflict (day) do update set placed = order_stats.placed + 1`;
      },
    },
    {
      name: 'mailer',
      errorPolicy: { maxAttempts: 5 }, // then it stops on that event until an operator acts
      handler: async (event) => {
        const order = event.data as { id: string; customer: string };
        await sendMail(order.customer, `Thank you for order ${order.id}`);
      },
    },
  ],
  ops: { auth: bearerAuth(process.env.SLUICE_OPS_TOKEN!) }, // ops routes + dashboard under /sluice
});

const orderBody = {
  type: 'object',
  required: ['customer', 'totalCents'],
  properties: { customer: { type: 'string' }, totalCents: { type: 'integer', minimum: 0 } },
} as const;

app.post<{ Body: { customer: string; totalCents: number } }>(
  '/orders',
  { schema: { body: orderBody } },
  async (request) => {
    const { customer, totalCents } = request.body;
    return app.sluice.transaction(async (tx) => {
      const [order] = await tx<{ id: string }[]>`
        insert into orders (customer, total_cents) values (${customer}, ${totalCents}) returning id`;
      await app.sluice.append(tx, [
        { streamId: `order-${order.id}`, type: 'OrderPlaced', data: { id: order.id, customer, totalCents } },
      ]);
      return order; // committed: this instance's dispatcher wakes at once, others by one NOTIFY
    });
  },
);

// close() stops the dispatcher, waiting for running handlers; then the pool ends.
process.once('SIGTERM', () => void app.close().then(() => sql.end()));

await app.listen({ port: Number(process.env.PORT ?? 3000) }); // onReady migrated the schema and started the dispatcher

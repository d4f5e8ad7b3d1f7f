import { hostname } from 'node:os';
import postgres from 'postgres';
import { append, createDispatcher, migrate, transaction, type EventRecord } from '@sluice/core';

const sql = postgres(process.env.DATABASE_URL!);
await migrate(sql); // creates the `sluice` schema once; safe to call from every instance at boot

// The app's own tables (a real app creates them in its migrations).
await sql`create table if not exists orders (
  id bigint generated always as identity primary key,
  customer text not null,
  total_cents integer not null
)`;
await sql`create table if not exists order_stats (day date primary key, placed integer not null)`;

// Stand-ins for your mail service and for the browsers connected to this process.
function sendMail(to: string, text: string): Promise<void> {
  console.log(`mail to ${to}: ${text}`);
  return Promise.resolve(); // a real one awaits its provider's API and throws when that fails
}
function broadcast(event: EventRecord): void {
  console.log(`live: ${event.type} ${event.streamId}`);
}

const dispatcher = createDispatcher({
  sql,
  instanceId: hostname(), // keys per-instance cursors: stable across restarts, unique per process
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
    {
      name: 'live-feed',
      delivery: 'per-instance', // every process gets every event
      startFrom: 'now',
      handler: (event) => {
        broadcast(event);
      },
    },
  ],
});
await dispatcher.start();

// Placing an order, as a request handler would:
const customer = 'ada@example.com';
const totalCents = 900;
await transaction(sql, async (tx) => {
  const [order] = await tx<{ id: string }[]>`
    insert into orders (customer, total_cents) values (${customer}, ${totalCents}) returning id`;
  await append(tx, [
    { streamId: `order-${order.id}`, type: 'OrderPlaced', data: { id: order.id, customer, totalCents } },
  ]);
});
// Committed: this process's dispatcher is woken at once, others by one coalesced NOTIFY.

// stop() waits for running handlers; then the pool ends.
process.once('SIGTERM', () => void dispatcher.stop().then(() => sql.end()));

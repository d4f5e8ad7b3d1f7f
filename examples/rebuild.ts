import postgres from 'postgres';
import { createDispatcher, liveVersion, migrate, type Consumer } from '@sluice/core';

const sql = postgres(process.env.DATABASE_URL!);
await migrate(sql);

// Each version writes its own table; the view `order_totals` reads the live one.
await sql`create table if not exists order_totals_v1 (stream_id text primary key, events bigint not null)`;
await sql`create table if not exists order_totals_v2 (stream_id text primary key, events bigint not null, paid bigint not null)`;
// The view is yours to create, for the first version; each takeover points it at the new one.
const [{ exists } = { exists: false }] = await sql`select to_regclass('order_totals') is not null as exists`;
if (!exists) await sql`create view order_totals as select * from order_totals_v1`;

const orderTotals = (version: 1 | 2): Consumer => ({
  name: 'order-totals',
  version, // declaring 2 beside 1 rebuilds version 2 from the beginning, while version 1 serves
  transactional: true, // each version's rows commit with its own cursor: exactly once
  liveView: { view: 'order_totals', source: `order_totals_v${version}` }, // switched by the takeover
  // The takeover waits for an operator (dashboard, `sluice rebuild approve order-totals`) unless
  // told otherwise: here it happens by itself once version 2 is within 100 events of the head.
  rebuild: { takeover: { withinEvents: 100 } },
  handler: async (event, ctx) => {
    const tx = ctx.tx!;
    if (ctx.version === 1) {
      await tx`insert into order_totals_v1 values (${event.streamId}, 1)
               on conflict (stream_id) do update set events = order_totals_v1.events + 1`;
    } else {
      const paid = event.type === 'OrderPaid' ? 1 : 0;
      await tx`insert into order_totals_v2 values (${event.streamId}, 1, ${paid})
               on conflict (stream_id) do update
               set events = order_totals_v2.events + 1, paid = order_totals_v2.paid + ${paid}`;
    }
  },
});

const dispatcher = createDispatcher({ sql, consumers: [orderTotals(1), orderTotals(2)] });
await dispatcher.start();

// Readers use the view, or ask which version is live inside their own transaction.
const live = await sql.begin('isolation level repeatable read', (tx) => liveVersion(tx, 'order-totals'));
console.log(`order-totals version ${live} is live`);
process.once('SIGTERM', () => void dispatcher.stop().then(() => sql.end()));

import { hostname } from 'node:os';
import postgres from 'postgres';
import { createDispatcher, migrate } from '@sluice/core';

const sql = postgres(process.env.DATABASE_URL!);
await migrate(sql);

// A stand-in for a webhook: a real one awaits an HTTP call and throws when it fails.
async function notifyPartner(orderId: string): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, 5));
  console.log(`partner notified of ${orderId}`);
}

const dispatcher = createDispatcher({
  sql,
  instanceId: hostname(), // lanes are shared out among the instances it names
  concurrency: 16, // turns at once in this process: up to 16 lanes
  consumers: [
    {
      name: 'partner-webhook',
      lanes: 16, // 16 streams at a time, each in order; spread over every instance
      types: ['OrderPaid'], // the fetch returns only these; the cursor passes the others
      // An order whose webhook keeps failing is parked, with its later events, in order;
      // the other orders go on. Replay it (or drop it) from the dashboard or `sluice replay-key`.
      errorPolicy: { maxAttempts: 5, parkKey: true },
      handler: async (event) => {
        await notifyPartner(event.streamId);
      },
    },
  ],
});
await dispatcher.start();
process.once('SIGTERM', () => void dispatcher.stop().then(() => sql.end()));

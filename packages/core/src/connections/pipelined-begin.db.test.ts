// A turn's BEGIN goes out with its row lock (docs/design.md §4.3: no round trip waits on BEGIN
// alone). Seen on the wire: the dispatcher's connections go through a TCP relay that records, per
// connection, what each side wrote and in which order; on the turn's connection nothing comes back
// from the server between the client's BEGIN and its lock statement.
import { createServer, connect as connectTcp, type Server } from 'node:net';
import { appendEvents, freshSchema, recordingConsumer } from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { testDispatcher } from '../test-support.js';

const db = await useTestDatabase();

/** What one relayed connection carried: 'c' for the client's writes, 's' for the server's. */
type Wire = { from: 'c' | 's'; text: string }[];
const wires: Wire[] = [];
let relay: Server;
let relayPort = 0;

beforeAll(async () => {
  const target = new URL(db.url);
  relay = createServer((client) => {
    const wire: Wire = [];
    wires.push(wire);
    const server = connectTcp(Number(target.port), target.hostname);
    client.on('data', (chunk) => wire.push({ from: 'c', text: chunk.toString('latin1') }));
    server.on('data', (chunk) => wire.push({ from: 's', text: chunk.toString('latin1') }));
    client.pipe(server);
    server.pipe(client);
    client.on('close', () => server.destroy());
    server.on('close', () => client.destroy());
    client.on('error', () => undefined);
    server.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve));
  relayPort = (relay.address() as { port: number }).port;
});

afterAll(async () => {
  await new Promise((resolve) => relay.close(resolve));
});

test("a turn's BEGIN and its row lock are written before the server answers either", async () => {
  const schema = await freshSchema(db.sql);
  const app = db.connect({ host: '127.0.0.1', port: relayPort, max: 2 });
  const consumer = recordingConsumer('projection');
  const dispatcher = testDispatcher(app, schema, [consumer.consumer]);
  await dispatcher.ensureRegistered();
  await appendEvents(db.sql, 2, undefined, schema);
  await dispatcher.runOnce();
  await dispatcher.runOnce();
  expect(consumer.ids()).toEqual([1n, 2n]);

  const turns = wires.filter((wire) => wire.some((w) => w.from === 'c' && w.text.includes('skip locked')));
  expect(turns.length, 'the turns ran on a relayed connection').toBeGreaterThan(0);
  for (const wire of turns) {
    const locks = wire.flatMap((w, i) => (w.from === 'c' && w.text.includes('skip locked') ? [i] : []));
    for (const lock of locks) {
      // The client's last BEGIN at or before the lock's write, and what the server sent in between.
      const begin = wire.findLastIndex((w, i) => i <= lock && w.from === 'c' && /\bbegin\b/.test(w.text));
      expect(begin, 'a BEGIN precedes the lock on its connection').toBeGreaterThan(-1);
      expect(wire.slice(begin, lock + 1).filter((w) => w.from === 's')).toEqual([]);
    }
  }
  await dispatcher.stop();
  await app.end();
});

test("a transactional handler's own savepoints work on the turn's transaction: rolled back alone, nested, named", async () => {
  const schema = await freshSchema(db.sql);
  await db.sql`create table ${db.sql(`${schema}.notes`)} (event_id bigint, note text)`;
  const consumer = recordingConsumer('projection', {
    transactional: true,
    handler: async (event, ctx) => {
      const tx = ctx.tx!;
      const note = (text: string, on = tx) =>
        on`insert into ${on(`${schema}.notes`)} values (${event.id.toString()}, ${text})`;
      await note('kept');
      await tx
        .savepoint(async (sp) => {
          await note('undone', sp);
          throw new Error('the handler gives this part up');
        })
        .catch(() => undefined);
      await tx.savepoint('named', async (sp) => {
        await note('outer', sp);
        await sp.savepoint(async (inner) => note('inner', inner));
      });
    },
  });
  const dispatcher = testDispatcher(db.sql, schema, [consumer.consumer]);
  await dispatcher.ensureRegistered();
  await appendEvents(db.sql, 2, undefined, schema);
  await dispatcher.runOnce();
  const notes = await db.sql<{ event_id: string; note: string }[]>`
    select event_id::text, note from ${db.sql(`${schema}.notes`)} order by event_id, note`;
  expect(notes.map((n) => `${n.event_id}:${n.note}`)).toEqual([
    '1:inner',
    '1:kept',
    '1:outer',
    '2:inner',
    '2:kept',
    '2:outer',
  ]);
});

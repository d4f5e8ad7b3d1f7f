import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import postgres from 'postgres';
import { recordNotifications, until } from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import { describe, expect, onTestFinished, test } from 'vitest';
import { append, transaction } from './append.js';
import {
  EventsNotStoredError,
  InvalidEventError,
  TransactionAbandonedError,
  TransactionControlError,
} from './errors.js';
import type { NewEvent } from './events.js';
import { silentLogger } from './logger.js';
import { pgArray } from './queries/pg-array.js';
import { prune } from './retention/prune.js';
import { migrate } from './schema/migrate.js';
import { verifySchema } from './schema/verify-schema.js';
import { wakeUpChannel } from './wake-up/channel.js';
import { wakeUpNotifierFor } from './wake-up/wake-up-notifier.js';

const db = await useTestDatabase();
const channel = wakeUpChannel('sluice');

const order = (n: number): NewEvent => ({ streamId: `order-${n}`, type: 'OrderPlaced', data: { n } });

async function countEvents(): Promise<number> {
  const [row] = await db.sql<{ n: number }[]>`select count(*)::int as n from sluice.events`;
  return row?.n ?? -1;
}

async function listen() {
  const recorder = await recordNotifications(db.connect({ max: 1 }), channel);
  onTestFinished(() => recorder.stop());
  return recorder;
}

function countOf(payloads: readonly string[], payload: string): number {
  return payloads.filter((p) => p === payload).length;
}

describe('append', () => {
  test('returns the stored events with bigint ids in the order given', async () => {
    const stored = await db.sql.begin((tx) =>
      append(tx, [order(1), order(2), { ...order(3), metadata: { correlationId: 'c-1' } }]),
    );
    expect(stored.map((e) => e.streamId)).toEqual(['order-1', 'order-2', 'order-3']);
    expect(stored.every((e) => typeof e.id === 'bigint')).toBe(true);
    expect(stored[1]!.id).toBe(stored[0]!.id + 1n);
    expect(stored[2]!.id).toBe(stored[0]!.id + 2n);
    expect(stored[2]).toMatchObject({
      type: 'OrderPlaced',
      data: { n: 3 },
      metadata: { correlationId: 'c-1' },
    });
    expect(stored[0]!.createdAt).toBeInstanceOf(Date);
  });

  test.each([
    ['one event (VALUES)', 1],
    ['a few events', 5],
    ['a large batch (over the VALUES bound)', 100],
  ])('returns, for %s, each event under the id the log stored it with', async (_, count) => {
    const events = Array.from({ length: count }, (_, n) => ({
      streamId: `s-${n % 3}`,
      type: `T${n}`,
      data: { n, zebra: 'z', a: [n, { nested: true }] },
      metadata: { m: n },
    }));
    const returned = await db.sql.begin((tx) => append(tx, events));
    const rows = await db.sql<
      { id: string; stream_id: string; type: string; data: unknown; metadata: unknown }[]
    >`
      select id::text as id, stream_id, type, data, metadata from sluice.events
      where id between ${returned[0]!.id.toString()}::bigint and ${returned.at(-1)!.id.toString()}::bigint
      order by events.id`;
    expect(returned.map((e) => [e.id.toString(), e.streamId, e.type, e.data, e.metadata])).toEqual(
      rows.map((r) => [r.id, r.stream_id, r.type, r.data, r.metadata]),
    );
    expect(returned.map((e) => e.type)).toEqual(events.map((e) => e.type)); // ids follow the order given
    // data and metadata are read lazily, but copies and JSON see them as plain fields.
    const first = returned[0]!;
    expect(JSON.parse(JSON.stringify({ ...first, id: first.id.toString() }))).toMatchObject({
      data: rows[0]!.data,
      metadata: rows[0]!.metadata,
    });
    expect({ ...first }.data).toEqual(rows[0]!.data);
    expect(first.data).toBe(first.data);
  });

  test('stores data as a jsonb object, even when it holds JSON text', async () => {
    const [event] = await db.sql.begin((tx) =>
      append(tx, [{ streamId: 's', type: 'Noted', data: { text: '{"looks":"like json"}' } }]),
    );
    const [row] = await db.sql<{ kind: string; text: string }[]>`
      select jsonb_typeof(data) as kind, data->>'text' as text from sluice.events where id = ${event!.id.toString()}`;
    expect(row).toEqual({ kind: 'object', text: '{"looks":"like json"}' });
  });

  test.each([
    ['a JSON string as data', { streamId: 's', type: 't', data: '{"a":1}' }, 'data'],
    ['an array as data', { streamId: 's', type: 't', data: [1] }, 'data'],
    ['null data', { streamId: 's', type: 't', data: null }, 'data'],
    ['an empty stream id', { streamId: '', type: 't', data: {} }, 'streamId'],
    ['a missing type', { streamId: 's', data: {} }, 'type'],
    ['a NUL in the type', { streamId: 's', type: 'a\u0000b', data: {} }, 'type'],
    ['a NUL inside data', { streamId: 's', type: 't', data: { note: 'a\u0000b' } }, 'data'],
    ['a NUL after a backslash', { streamId: 's', type: 't', data: { note: 'a\\\u0000' } }, 'data'],
    ['a NUL in a nested key', { streamId: 's', type: 't', data: { a: [{ ['k\u0000']: 1 }] } }, 'data'],
    ['a NUL inside metadata', { streamId: 's', type: 't', data: {}, metadata: { m: '\u0000' } }, 'metadata'],
    ['a bigint inside data', { streamId: 's', type: 't', data: { n: 1n } }, 'data'],
    ['metadata that is not an object', { streamId: 's', type: 't', data: {}, metadata: 'x' }, 'metadata'],
    ['null metadata', { streamId: 's', type: 't', data: {}, metadata: null }, 'metadata'],
    [
      'a stream id whose getter throws',
      {
        get streamId(): string {
          throw new Error('not now');
        },
        type: 't',
        data: {},
      },
      'streamId',
    ],
    ['a hole in the array of events', undefined, 'event'],
  ])('rejects %s with a typed error and writes nothing', async (_label, bad, field) => {
    const before = await countEvents();
    const error = await db.sql
      .begin(async (tx) => {
        const events: NewEvent[] = [order(1)];
        if (bad === undefined)
          events.length = 2; // a sparse array: [order(1), <hole>]
        else events.push(bad as unknown as NewEvent);
        await append(tx, events);
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidEventError);
    expect(error).toMatchObject({ code: 'SLUICE_INVALID_EVENT', index: 1, field });
    expect(await countEvents()).toBe(before);
  });

  // Lone UTF-16 surrogates: PostgreSQL refuses them in jsonb (22P02, aborting the caller's
  // transaction) and UTF-8 encoding turns them into U+FFFD in text columns (two stream ids become one).
  test.each([
    ['a lone high surrogate in the stream id', { streamId: 's-\uD800', type: 't', data: {} }, 'streamId'],
    ['a lone low surrogate in the type', { streamId: 's', type: 'T\uDC00', data: {} }, 'type'],
    ['a lone surrogate in a data value', { streamId: 's', type: 't', data: { note: 'a\uD83D' } }, 'data'],
    ['a lone surrogate in a data key', { streamId: 's', type: 't', data: { ['k\uDE00']: 1 } }, 'data'],
    ['reversed surrogates in data', { streamId: 's', type: 't', data: { n: '\uDE00\uD83D' } }, 'data'],
    [
      'a lone surrogate in metadata',
      { streamId: 's', type: 't', data: {}, metadata: { m: ['\uDBFF'] } },
      'metadata',
    ],
  ])(
    'rejects %s with a typed error naming it, and the transaction stays usable',
    async (_label, bad, field) => {
      const before = await countEvents();
      const stored = await db.sql.begin(async (tx) => {
        const error = await append(tx, [order(1), bad as unknown as NewEvent]).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(InvalidEventError);
        expect(error).toMatchObject({ code: 'SLUICE_INVALID_EVENT', index: 1, field });
        expect((error as Error).message).toMatch(/surrogate/);
        return append(tx, [order(2)]); // the caller's transaction goes on
      });
      expect(stored).toHaveLength(1);
      expect(await countEvents()).toBe(before + 1);
    },
  );

  test('accepts surrogate pairs and the escaped text \\uD800, which are not lone surrogates', async () => {
    const note = '\u{1F600} and C:\\uD800 and \\\\uDC00';
    const [event] = await db.sql.begin((tx) =>
      append(tx, [{ streamId: 's-\u{1F600}', type: 't', data: { note, ['\u{1F600}']: 1 } }]),
    );
    const [row] = await db.sql<{ note: string; stream_id: string }[]>`
      select data->>'note' as note, stream_id from sluice.events where id = ${event!.id.toString()}`;
    expect(row).toEqual({ note, stream_id: 's-\u{1F600}' });
  });

  test('accepts the text \\u0000 (a backslash and five characters), which is not a NUL', async () => {
    const note = 'C:\\u0000 and \\\\u0000';
    const [event] = await db.sql.begin((tx) => append(tx, [{ streamId: 's', type: 't', data: { note } }]));
    const [row] = await db.sql<{ note: string }[]>`
      select data->>'note' as note from sluice.events where id = ${event!.id.toString()}`;
    expect(row?.note).toBe(note);
  });

  test('leaves the caller’s transaction usable after rejecting bad input', async () => {
    const stored = await db.sql.begin(async (tx) => {
      await expect(
        append(tx, [{ streamId: 's', type: 't', data: 'nope' } as unknown as NewEvent]),
      ).rejects.toThrow();
      return append(tx, [order(7)]);
    });
    expect(stored).toHaveLength(1);
  });

  test("into a schema that is not migrated: SLUICE_SCHEMA_NOT_MIGRATED (not a user trigger's missing table); without a transaction: SLUICE_INVALID_OPTION", async () => {
    const event = { streamId: 's', type: 't', data: {} };
    await expect(
      db.sql.begin((tx) => append(tx, [event], { schema: 'never_migrated' })),
    ).rejects.toMatchObject({ code: 'SLUICE_SCHEMA_NOT_MIGRATED', schema: 'never_migrated' });
    await expect(append(null as never, [event])).rejects.toMatchObject({
      code: 'SLUICE_INVALID_OPTION',
      option: 'tx',
    });
    // A missing table a trigger of the user's reads is the user's error, passed through as is.
    await migrate(db.sql, { schema: 'own_trigger', logger: silentLogger });
    await db.sql.unsafe(`
      create function own_trigger.audit() returns trigger language plpgsql as
        $$ begin insert into own_trigger.no_such_table values (new.id); return new; end $$;
      create trigger audit before insert on own_trigger.events for each row execute function own_trigger.audit()`);
    const raw = await db.sql
      .begin((tx) => append(tx, [event], { schema: 'own_trigger' }))
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    expect(raw).toMatchObject({ code: '42P01' });
    expect((raw as Error).message).toContain('no_such_table');
  });

  test('rejects events larger than maxEventBytes', async () => {
    await expect(
      db.sql.begin((tx) =>
        append(tx, [{ streamId: 's', type: 't', data: { blob: 'x'.repeat(100) } }], { maxEventBytes: 64 }),
      ),
    ).rejects.toMatchObject({ code: 'SLUICE_INVALID_EVENT', field: 'data' });
    // A limit PostgreSQL's jsonb cannot honour is refused before anything is sent.
    for (const maxEventBytes of [268_435_456, 2 ** 40]) {
      await expect(
        db.sql.begin((tx) => append(tx, [{ streamId: 's', type: 't', data: {} }], { maxEventBytes })),
      ).rejects.toMatchObject({ code: 'SLUICE_INVALID_OPTION', option: 'maxEventBytes' });
    }
  });

  test('measures maxEventBytes and the name limit in UTF-8 bytes, not characters', async () => {
    const appendOne = (event: NewEvent, maxEventBytes?: number) =>
      db.sql.begin((tx) => append(tx, [event], maxEventBytes === undefined ? {} : { maxEventBytes }));
    // {"blob":"…"} is 11 bytes around the text, and the metadata {} 2 more.
    const blob = (text: string): NewEvent => ({ streamId: 's', type: 't', data: { blob: text } });
    await expect(appendOne(blob('é'.repeat(25)), 63)).resolves.toHaveLength(1); // 63 bytes
    await expect(appendOne(blob('é'.repeat(26)), 64)).rejects.toMatchObject({ field: 'data' }); // 65
    await expect(appendOne(blob('😀'.repeat(12)), 61)).resolves.toHaveLength(1); // 61
    await expect(appendOne(blob('😀'.repeat(13)), 64)).rejects.toMatchObject({ field: 'data' }); // 65
    await expect(appendOne({ streamId: '€'.repeat(333), type: 't', data: {} })).resolves.toHaveLength(1);
    await expect(appendOne({ streamId: '€'.repeat(334), type: 't', data: {} })).rejects.toMatchObject({
      code: 'SLUICE_INVALID_EVENT',
      field: 'streamId',
    });
  });

  test('events without metadata store {}, whether or not others in the batch have some', async () => {
    const plain = (n: number): NewEvent => ({ streamId: 's', type: 't', data: { n } });
    const tagged = (n: number): NewEvent => ({ ...plain(n), metadata: { correlationId: `c-${n}` } });
    const none = await db.sql.begin((tx) => append(tx, [plain(1), plain(2)]));
    const mixed = await db.sql.begin((tx) => append(tx, [plain(3), tagged(4), plain(5)]));
    const ids = [...none, ...mixed].map((e) => e.id.toString());
    const rows = await db.sql<{ metadata: string; kind: string }[]>`
      select metadata::text as metadata, jsonb_typeof(metadata) as kind from sluice.events
      where id = any(${pgArray(ids)}::bigint[]) order by id`;
    expect(rows).toEqual([
      { metadata: '{}', kind: 'object' },
      { metadata: '{}', kind: 'object' },
      { metadata: '{}', kind: 'object' },
      { metadata: '{"correlationId": "c-4"}', kind: 'object' },
      { metadata: '{}', kind: 'object' },
    ]);
    expect(mixed.map((e) => e.metadata)).toEqual([{}, { correlationId: 'c-4' }, {}]);
  });

  test('keeps ids exact around 2^53 and across 9/10 digits', async () => {
    await migrate(db.sql, { schema: 'big_ids', logger: silentLogger });
    await db.sql`alter sequence big_ids.events_id_seq restart with 9007199254740991`;
    const stored = await db.sql.begin((tx) =>
      append(tx, [order(1), order(2), order(3)], { schema: 'big_ids' }),
    );
    expect(stored.map((e) => e.id)).toEqual([9007199254740991n, 9007199254740992n, 9007199254740993n]);
    await db.sql`alter sequence big_ids.events_id_seq restart with 999999999`;
    const around = await db.sql.begin((tx) => append(tx, [order(4), order(5)], { schema: 'big_ids' }));
    expect(around.map((e) => e.id)).toEqual([999999999n, 1000000000n]);
    expect(around[0]!.id < around[1]!.id).toBe(true);
  });

  test('works on a pool without fetch_types (as behind PgBouncer), where postgres.js cannot serialise arrays', async () => {
    const bare = db.connect({ max: 1, fetch_types: false });
    const stored = await bare.begin((tx) => append(tx, [order(1), order(2)]));
    expect(stored.map((e) => e.streamId)).toEqual(['order-1', 'order-2']);
    const many = await bare.begin((tx) =>
      append(
        tx,
        Array.from({ length: 100 }, (_, n) => order(n)),
      ),
    );
    expect(many.map((e) => e.streamId)).toEqual(Array.from({ length: 100 }, (_, n) => `order-${n}`));
  });

  test('an empty batch writes nothing and returns nothing', async () => {
    const before = await countEvents();
    expect(await db.sql.begin((tx) => append(tx, []))).toEqual([]);
    expect(await countEvents()).toBe(before);
  });
});

describe('wake-ups', () => {
  test('transaction(): other processes are notified after the commit, never before it', async () => {
    const recorder = await listen();
    const nonce = wakeUpNotifierFor(db.sql, 'sluice').nonce;
    await transaction(db.sql, async (tx) => {
      await append(tx, [order(1)]);
      // Committed by another session while ours is still open: everything notified so far arrives first.
      expect(await recorder.barrier(db.sql)).toEqual([]);
    });
    await expect(recorder.next((payload) => payload === nonce)).resolves.toBe(nonce);
  });

  test('transaction(): a rolled-back append leaves no row and no notification', async () => {
    const recorder = await listen();
    const before = await countEvents();
    await expect(
      transaction(db.sql, async (tx) => {
        await append(tx, [order(1), order(2)]);
        throw new Error('the order was refused');
      }),
    ).rejects.toThrow('the order was refused');
    expect(await countEvents()).toBe(before);
    await wakeUpNotifierFor(db.sql, 'sluice').flush();
    expect(await recorder.barrier(db.sql)).toEqual([]);
  });

  test('transaction(): wakes a local subscriber directly once committed', async () => {
    const notifier = wakeUpNotifierFor(db.sql, 'sluice');
    let woken = 0;
    const unsubscribe = notifier.subscribe(() => (woken += 1));
    onTestFinished(unsubscribe);
    await transaction(db.sql, async (tx) => {
      await append(tx, [order(1)]);
      expect(woken).toBe(0);
    });
    expect(woken).toBe(1);
  });

  test('transaction(): an append inside a savepoint still wakes after the commit', async () => {
    const recorder = await listen();
    const nonce = wakeUpNotifierFor(db.sql, 'sluice').nonce;
    await transaction(db.sql, async (tx) => {
      await tx.savepoint((sp) => append(sp, [order(1)]));
    });
    await expect(recorder.next((payload) => payload === nonce)).resolves.toBe(nonce);
  });

  test('transaction(): an append in a named savepoint nested in another wakes once committed', async () => {
    const notifier = wakeUpNotifierFor(db.sql, 'sluice');
    let woken = 0;
    const unsubscribe = notifier.subscribe(() => (woken += 1));
    onTestFinished(unsubscribe);
    const [count] = await transaction(db.sql, (tx) =>
      tx.savepoint((outer) =>
        outer.savepoint('inner', async (inner) => {
          await append(inner, [order(1)]);
          return inner<{ n: number }[]>`select count(*)::int as n from sluice.events`;
        }),
      ),
    );
    expect(count?.n).toBeGreaterThan(0);
    expect(woken).toBe(1);
  });

  test('transaction(): many concurrent commits are coalesced into few notifications', async () => {
    const recorder = await listen();
    const nonce = wakeUpNotifierFor(db.sql, 'sluice').nonce;
    await Promise.all(
      Array.from({ length: 40 }, (_, n) => transaction(db.sql, (tx) => append(tx, [order(n)]))),
    );
    await wakeUpNotifierFor(db.sql, 'sluice').flush();
    const received = countOf(await recorder.barrier(db.sql), nonce);
    expect(received).toBeGreaterThanOrEqual(1);
    expect(received).toBeLessThan(40);
  });

  test('notifier: sparse commits are each notified at once, not at the end of the coalescing window', async () => {
    const recorder = await listen();
    const notifier = wakeUpNotifierFor(db.connect({ max: 2 }), 'sluice', { coalesceMs: 60_000, quietMs: 20 });
    notifier.poke(); // sent at once
    notifier.poke(); // one commit before it in the window: sent quietMs after the first
    await until(() => countOf(recorder.received, notifier.nonce) === 2, 5_000, 'the second notification');
  });

  test("notifier: the NOTIFY's transaction does not wait for its WAL flush", async () => {
    // A NOTIFY commits a transaction with an xid: waiting for its flush would add a disk flush per
    // NOTIFY to the writers' own and hold the notification back until it is done.
    const recorder = await listen();
    const notifies: string[] = [];
    const sql = db.connect({
      max: 1,
      debug: (_connection, query) => {
        if (query.includes('pg_notify')) notifies.push(query);
      },
    });
    const setting = async () =>
      (await sql<{ value: string }[]>`select current_setting('synchronous_commit') as value`)[0]?.value;
    const before = await setting();
    const notifier = wakeUpNotifierFor(sql, 'sluice');
    notifier.poke();
    await notifier.flush();
    await recorder.next((payload) => payload === notifier.nonce);
    expect(notifies).toHaveLength(1);
    // For the statement's own transaction only: the pooled session keeps its setting.
    expect(notifies[0]).toContain("set_config('synchronous_commit', 'off', true)");
    expect(await setting()).toBe(before);
  });

  test('notifier: a stream of commits shares one notification per coalescing window', async () => {
    const recorder = await listen();
    const sql = db.connect({ max: 2 });
    const notifier = wakeUpNotifierFor(sql, 'sluice', { coalesceMs: 60_000, quietMs: 20 });
    notifier.poke(); // sent at once
    notifier.poke(); // these two follow fewer than three commits: sent together quietMs later
    notifier.poke();
    await until(() => countOf(recorder.received, notifier.nonce) === 2, 5_000, 'the second notification');
    notifier.poke(); // three commits came within the window before each of these: they wait for it
    notifier.poke();
    expect(countOf(await recorder.barrier(sql), notifier.nonce)).toBe(2);
    await notifier.flush();
    expect(countOf(await recorder.barrier(sql), notifier.nonce)).toBe(3);
  });

  test("wakeUp: 'in-transaction' notifies at commit and not for a rollback", async () => {
    const recorder = await listen();
    await db.sql.begin(async (tx) => {
      await append(tx, [order(1)], { wakeUp: 'in-transaction' });
      expect(await recorder.barrier(db.sql)).toEqual([]);
    });
    await expect(recorder.next((payload) => payload === '')).resolves.toBe('');

    const rolledBack = await recordNotifications(db.connect({ max: 1 }), channel);
    onTestFinished(() => rolledBack.stop());
    await db.sql
      .begin(async (tx) => {
        await append(tx, [order(2)], { wakeUp: 'in-transaction' });
        throw new Error('rollback');
      })
      .catch(() => undefined);
    expect(await rolledBack.barrier(db.sql)).toEqual([]);
  });

  test("plain sql.begin with wakeUp: 'auto' sends nothing: dispatchers find the events by polling", async () => {
    const recorder = await listen();
    await db.sql.begin((tx) => append(tx, [order(1)]));
    await wakeUpNotifierFor(db.sql, 'sluice').flush();
    expect(await recorder.barrier(db.sql)).toEqual([]);
  });
});

test("transaction(): a COMMIT through its tx is refused before it is sent; the events and the caller's writes commit once, at the end, or not at all", async () => {
  const before = await countEvents();
  await expect(
    transaction(db.sql, async (tx) => {
      await append(tx, [order(1)]);
      await tx.unsafe('/* early */ commit');
    }),
  ).rejects.toMatchObject({ code: 'SLUICE_TRANSACTION_CONTROL', statement: 'COMMIT' });
  expect(await countEvents()).toBe(before); // the callback failed: nothing committed
  // Every statement of a text is looked at: a migration-style file, through unsafe() or file().
  const folder = await mkdtemp(join(tmpdir(), 'sluice-sql-'));
  onTestFinished(() => rm(folder, { recursive: true, force: true }));
  const file = join(folder, 'migration.sql');
  await writeFile(file, "begin;\ninsert into sluice.events_marker values ('x'); -- not run\ncommit;\n");
  await transaction(db.sql, async (tx) => {
    await append(tx, [order(2)]);
    expect(() => tx`end`).toThrow(TransactionControlError);
    expect(() => tx.unsafe('select 1; /* then */ commit')).toThrow(TransactionControlError);
    // Fragments are read too, a query of another pool among them.
    expect(() => tx`select 1; ${db.sql.unsafe('commit')}`).toThrow(TransactionControlError);
    expect(() => tx`${tx``}commit`).toThrow(TransactionControlError);
    expect(() => tx.file(file)).toThrow(TransactionControlError);
  });
  expect(await countEvents()).toBe(before + 1);
});

test("a trigger of the database's that drops some of the inserted rows: append() says so rather than pair the stored ids with the wrong events", async () => {
  const schema = 'append_dropping';
  await db.sql`drop schema if exists ${db.sql(schema)} cascade`;
  await migrate(db.sql, { schema, logger: silentLogger });
  onTestFinished(() => db.sql`drop schema if exists ${db.sql(schema)} cascade`.then(() => undefined));
  await db.sql.unsafe(`
    create function ${schema}.drop_some() returns trigger language plpgsql as
      $$ begin if new.type = 'Drop' then return null; end if; return new; end $$;
    create trigger drop_some before insert on ${schema}.events for each row execute function ${schema}.drop_some()`);
  const events = ['Keep', 'Drop', 'Keep2'].map((type) => ({ streamId: 's', type, data: {} }));
  const error = await transaction(db.sql, (tx) => append(tx, events, { schema })).catch((e: unknown) => e);
  expect(error).toBeInstanceOf(EventsNotStoredError);
  expect(error).toMatchObject({ code: 'SLUICE_EVENTS_NOT_STORED', sent: 3, stored: 2 });
  const stored = await db.sql`select 1 from ${db.sql(schema)}.events`;
  expect(stored).toHaveLength(0); // the caller's transaction rolled back
});

describe('append() after the transaction lost its connection', () => {
  test('sends nothing: no event lands outside the transaction on the connection the pool opened again', async () => {
    // One connection: a statement queued on the pool while the transaction holds it makes
    // postgres.js open the same connection object again when its session dies, and a statement the
    // transaction's code sends afterwards would run there, outside any transaction, and commit.
    const app = db.connect({ max: 1 });
    onTestFinished(() => app.end({ timeout: 1 }));
    const before = await countEvents();
    let pid: number | undefined;
    let release: () => void = () => undefined;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    let appended: Promise<unknown> | undefined;
    const outcome = transaction(app, async (tx) => {
      const [row] = await tx<{ pid: number }[]>`select pg_backend_pid() as pid`;
      pid = row?.pid;
      await released;
      appended = append(tx, [order(1)]);
      return appended;
    });
    outcome.catch(() => undefined);
    await until(() => pid !== undefined);
    const queued = app`select 1 as one`; // waits for the pool's one connection
    await db.sql`select pg_terminate_backend(${pid ?? 0})`;
    await expect(outcome).rejects.toThrow(); // the transaction failed with its connection
    await queued; // served by the connection opened again
    release();
    await until(() => appended !== undefined);
    await expect(appended).rejects.toThrow(TransactionAbandonedError);
    await expect(appended).rejects.toMatchObject({ code: 'SLUICE_TRANSACTION_ABANDONED' });
    await app`select 1`;
    expect(await countEvents()).toBe(before);
  });
});

describe("the application's pool writes times in another DateStyle", () => {
  test('append() returns the time the row holds, in either form of its insert', async () => {
    const app = db.connect({ max: 1, connection: { DateStyle: 'SQL, DMY', TimeZone: 'Asia/Kolkata' } });
    onTestFinished(() => app.end());
    const small = await transaction(app, (tx) => append(tx, [order(1)]));
    const large = await transaction(app, (tx) =>
      append(
        tx,
        Array.from({ length: 70 }, (_, i) => order(i + 2)),
      ),
    );
    const ids = [...small, ...large].map((e) => e.id.toString());
    const rows = await db.sql<{ id: string; ms: string }[]>`
      select id::text, (extract(epoch from created_at) * 1000)::bigint::text as ms
      from sluice.events where id = any(${pgArray(ids)}::bigint[])`;
    const stored = new Map(rows.map((r) => [r.id, Number(r.ms)]));
    for (const event of [...small, ...large]) {
      expect(event.createdAt).toBeInstanceOf(Date);
      expect(Math.abs(event.createdAt.getTime() - stored.get(event.id.toString())!)).toBeLessThanOrEqual(1);
    }
  });
});

describe("the application's pool renames columns (postgres.camel, postgres.pascal)", () => {
  test('migrate(), verifySchema(), append() and prune() read their rows by position, as PostgreSQL returns them', async () => {
    for (const transform of [postgres.camel, postgres.pascal]) {
      const schema = `renamed_${Math.random().toString(36).slice(2, 10)}`;
      const app = db.connect({ max: 2, transform });
      onTestFinished(() => app.end());
      const migrated = await migrate(app, { schema, logger: silentLogger });
      expect(migrated.applied.length).toBeGreaterThan(0);
      expect((await migrate(app, { schema, logger: silentLogger })).applied).toEqual([]);
      expect((await verifySchema(app, { schema })).serverVersionNum).toBeGreaterThan(140000);
      const small = await transaction(app, (tx) => append(tx, [order(1), order(2)], { schema }));
      const large = await transaction(app, (tx) =>
        append(
          tx,
          Array.from({ length: 70 }, (_, i) => order(i + 3)),
          { schema },
        ),
      );
      for (const event of [...small, ...large]) expect(event.createdAt).toBeInstanceOf(Date);
      expect([...small, ...large].map((e) => e.id)).toEqual(
        Array.from({ length: 72 }, (_, i) => BigInt(i + 1)),
      );
      expect(await prune(app, { before: 3n, schema })).toEqual({ deleted: 2 });
      await expect(prune(app, { before: 100n, schema })).rejects.toMatchObject({
        code: 'SLUICE_BEYOND_HEAD',
      });
    }
  });
});

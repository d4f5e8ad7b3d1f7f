// docs/reliability.md §5, G6–G8: what the events id sequence can do to a dispatcher. G6: CACHE > 1 is
// refused at start (and by migrate). G7: setval() jumps the sequence by 1e6 mid-stream; the hole is
// one pending range that burns. G8: ids around 9/10 digits and 2^53 stay exact and in order.
import { setTimeout as sleep } from 'node:timers/promises';
import {
  appendEvents,
  consumerRow,
  freshSchema,
  type RecordingConsumer,
  recordingConsumer,
  until,
} from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import { createAdmin } from '@sluice/admin';
import { append, createDispatcher, migrate, silentLogger, type EventRecord, type Sql } from '@sluice/core';
import { tables } from '@sluice/core/internal';
import { afterAll, expect, test } from 'vitest';
import { check, gapRows, head, quietDispatcher, round, ScenarioRecorder } from './support.js';

const db = await useTestDatabase();
const recorder = new ScenarioRecorder('scenarios-sequence');

afterAll(async () => {
  await recorder.write(db.sql);
});

async function sequenceOf(sql: Sql, schema: string): Promise<string> {
  const [row] = await sql<{ seq: string }[]>`
    select pg_get_serial_sequence(${`${schema}.events`}, 'id') as seq`;
  if (!row) throw new Error('no identity sequence');
  return row.seq;
}

test('G6: a sequence with CACHE 20 makes start() and migrate() refuse with SLUICE_SEQUENCE_CACHED', async () => {
  await recorder.run('G6', 'Sequence CACHE > 1', ['startup guard'], async (figures) => {
    const schema = await freshSchema(db.sql, 'g6');
    const seq = await sequenceOf(db.sql, schema);
    await db.sql`alter sequence ${db.sql(seq)} cache 20`;

    // Why it matters: 4 writer sessions each draw from their own block of 20.
    const writers = Array.from({ length: 4 }, () => db.connect({ max: 1 }));
    const drawn: bigint[] = [];
    for (let round = 0; round < 2; round++) {
      for (const writer of writers) {
        const [event] = await appendEvents(writer, 1, undefined, schema);
        drawn.push(event!.id);
      }
    }
    await Promise.all(writers.map((w) => w.end()));
    const outOfOrder = drawn.filter((id, i) => i > 0 && id < drawn[i - 1]!).length;
    figures['ids drawn by 4 sessions in commit order'] = drawn.join(' ');
    figures['commits below an earlier id'] = outOfOrder;

    const c = recordingConsumer('g6-consumer');
    const dispatcher = createDispatcher({
      sql: db.sql,
      schema,
      consumers: [c.consumer],
      logger: silentLogger,
    });
    let startError: unknown;
    try {
      await dispatcher.start();
    } catch (error) {
      startError = error;
    } finally {
      await dispatcher.stop();
    }
    let migrateError: unknown;
    try {
      await migrate(db.sql, { schema, logger: silentLogger });
    } catch (error) {
      migrateError = error;
    }
    const codeOf = (e: unknown) => (e as { code?: string } | undefined)?.code ?? 'none';
    figures['start() refused'] = startError === undefined ? 'no' : 'yes';
    figures['start() code'] = codeOf(startError);
    figures['start() message'] = startError instanceof Error ? startError.message : '';
    figures['migrate() refused'] = migrateError === undefined ? 'no' : 'yes';
    figures['migrate() code'] = codeOf(migrateError);

    const t = tables(db.sql, schema);
    const [registered] = await db.sql<{ n: number }[]>`select count(*)::int as n from ${t.consumers}`;
    figures['consumer rows registered by the refused start'] = registered?.n ?? -1;
    expect(outOfOrder).toBeGreaterThan(0);
    expect(codeOf(startError)).toBe('SLUICE_SEQUENCE_CACHED');
    expect(codeOf(migrateError)).toBe('SLUICE_SEQUENCE_CACHED');
    expect((startError as Error).message).toContain('CACHE 20');
    expect(registered?.n).toBe(0);
    expect(c.seen).toHaveLength(0);

    // The guard is exactly the cache: back to CACHE 1, the same schema starts.
    await db.sql`alter sequence ${db.sql(seq)} cache 1`;
    const fixed = quietDispatcher(db.sql, schema, [c.consumer]);
    try {
      await fixed.start();
      await until(() => c.seen.length === drawn.length, 10_000, 'delivery after CACHE 1');
    } finally {
      await fixed.stop();
    }
    figures['starts after CACHE 1'] = 'yes';
  });
});

/** Records every persisted cursor value it samples and counts decreases (I4). */
function cursorWatch(sql: Sql, schema: string, name: string) {
  let last = -1n;
  let regressions = 0;
  const run = { stopped: false };
  const loop = (async () => {
    while (!run.stopped) {
      try {
        const { cursor } = await consumerRow(sql, schema, name);
        if (cursor < last) regressions += 1;
        last = cursor;
      } catch {
        // row not registered yet
      }
      await sleep(10);
    }
  })();
  return {
    async stop() {
      run.stopped = true;
      await loop;
      return regressions;
    },
  };
}

/**
 * `<id>-consumer` in a fresh schema, on a started dispatcher of its own pool, with its cursor
 * watched from the start (cursorWatch); `seq` is the schema's events id sequence.
 */
async function watchedConsumer(id: string, options: { pollIntervalMs: number; batchSize?: number }) {
  const schema = await freshSchema(db.sql, id);
  const seq = await sequenceOf(db.sql, schema);
  const t = tables(db.sql, schema);
  const c = recordingConsumer(`${id}-consumer`);
  const pool = db.connect({ max: 6 });
  const dispatcher = quietDispatcher(pool, schema, [c.consumer], options);
  await dispatcher.start();
  const cursors = cursorWatch(db.sql, schema, `${id}-consumer`);
  return { schema, seq, t, c, dispatcher, cursors };
}

/** Out-of-order deliveries (ids compared as bigint). */
function inversions(c: RecordingConsumer): number {
  const ids = c.ids();
  return ids.filter((id, i) => i > 0 && id <= ids[i - 1]!).length;
}

test('G7: setval(+1e6) mid-stream leaves one pending range that burns; delivery goes on', async () => {
  await recorder.run('G7', 'Sequence jumps (setval +1e6)', ['I1', 'I9'], async (figures) => {
    const { schema, seq, t, c, dispatcher, cursors } = await watchedConsumer('g7', { pollIntervalMs: 50 });

    // Sample the consumer's gap rows and its state row's size while the writer runs.
    const sampling = { on: true };
    let maxGapRows = 0;
    let bigRangeSeenAt: number | undefined;
    let bigRangeGoneAt: number | undefined;
    let bigRangeWidth = 0n;
    const rowBytes: number[] = [];
    const sampler = (async () => {
      while (sampling.on) {
        const ranges = await gapRows(db.sql, schema, 'g7-consumer');
        maxGapRows = Math.max(maxGapRows, ranges.length);
        const big = ranges.find((r) => r.to - r.from + 1n >= 1_000_000n);
        if (big && bigRangeSeenAt === undefined) {
          bigRangeSeenAt = performance.now();
          bigRangeWidth = big.to - big.from + 1n;
        }
        if (!big && bigRangeSeenAt !== undefined && bigRangeGoneAt === undefined)
          bigRangeGoneAt = performance.now();
        const [size] = await db.sql<{ bytes: number }[]>`
          select pg_column_size(c.*)::int as bytes from ${t.consumers} c where c.name = 'g7-consumer'`;
        if (size) rowBytes.push(size.bytes);
        await sleep(5);
      }
    })();

    const writer = db.connect({ max: 1 });
    const appended: bigint[] = [];
    let jumpAfter = 0n;
    try {
      for (let n = 0; n < 200; n++) {
        if (n === 100) {
          const [last] = await writer<{ v: string }[]>`select last_value::text as v from ${writer(seq)}`;
          jumpAfter = BigInt(last!.v);
          await writer`select setval(${seq}, ${(jumpAfter + 1_000_000n).toString()}::bigint)`;
        }
        const [event] = await appendEvents(
          writer,
          1,
          (i) => ({ streamId: 'g7', type: 'G7', data: { n: n + i } }),
          schema,
        );
        appended.push(event!.id);
        await sleep(2);
      }
      await until(
        async () =>
          (await consumerRow(db.sql, schema, 'g7-consumer')).cursor === (await head(db.sql, schema)),
        30_000,
        'the consumer to reach the head',
      );
      await until(() => bigRangeGoneAt !== undefined, 30_000, 'the 1e6-wide range to burn');
    } finally {
      sampling.on = false;
      await sampler;
      await dispatcher.stop();
      await writer.end();
    }
    const regressions = await cursors.stop();
    const delivered = c.ids();
    const expectedHole = { from: jumpAfter + 1n, to: jumpAfter + 1_000_000n };
    const final = await gapRows(db.sql, schema, 'g7-consumer');
    figures['events appended'] = appended.length;
    figures['hole'] = `${expectedHole.from}–${expectedHole.to}`;
    figures['widest range seen (ids)'] = bigRangeWidth.toString();
    figures['max gap rows'] = maxGapRows;
    figures['time to burn the 1e6 range (ms)'] =
      bigRangeSeenAt !== undefined && bigRangeGoneAt !== undefined
        ? round(bigRangeGoneAt - bigRangeSeenAt)
        : 'never';
    figures['consumer row bytes min/max'] = `${Math.min(...rowBytes)}/${Math.max(...rowBytes)}`;
    figures['gap rows after'] = final.length;
    figures['lost'] = appended.filter((id) => !delivered.includes(id)).length;
    figures['duplicated'] = delivered.length - new Set(delivered).size;
    figures['inversions'] = inversions(c);
    figures['cursor regressions'] = regressions;
    figures['immediate shutdown (≤ 32 skipped values)'] = 'not run: the shared test server cannot be crashed';

    check(
      appended[100]! - appended[99]! === 1_000_001n,
      `the jump did not happen: ${appended[99]} → ${appended[100]}`,
    );
    expect(bigRangeWidth).toBe(1_000_000n);
    expect(maxGapRows).toBe(1); // one range, however wide
    expect(final).toHaveLength(0);
    expect(delivered).toEqual(appended); // every event, once, in order
    expect(regressions).toBe(0);
    // Constant size: a pending range adds a few nullable scalars and watched xids to the state row
    // (tens of bytes), never anything proportional to the 1e6 ids it covers.
    expect(Math.max(...rowBytes) - Math.min(...rowBytes)).toBeLessThanOrEqual(256);
  });
});

test('G8: ids across 999 999 999 → 1 000 000 000 and 2^53 arrive exact and in order', async () => {
  await recorder.run('G8', 'Big ids (9/10 digits, 2^53)', ['I2', 'I4'], async (figures) => {
    const { schema, seq, t, c, dispatcher, cursors } = await watchedConsumer('g8', {
      pollIntervalMs: 20,
      batchSize: 7, // several turns inside each boundary region
    });
    const writer = db.connect({ max: 1 });
    const appended: EventRecord[] = [];
    const one = async (n: number) => {
      const [event] = await appendEvents(
        writer,
        1,
        () => ({ streamId: `g8-${n % 3}`, type: 'G8', data: { n } }),
        schema,
      );
      appended.push(event!);
    };
    try {
      await appendEvents(writer, 3, undefined, schema).then((events) => appended.push(...events));
      await writer`alter sequence ${writer(seq)} restart 999999990`;
      for (let n = 0; n < 25; n++) await one(n);
      await writer`alter sequence ${writer(seq)} restart 9007199254740900`;
      for (let n = 0; n < 60; n++) await one(n);
      // One transaction of 80 across 2^53 + 1 (9007199254740993: a Number rounds it to …992).
      appended.push(
        ...(await writer.begin((tx) =>
          append(
            tx,
            Array.from({ length: 80 }, (_, n) => ({ streamId: 'g8-batch', type: 'G8', data: { n } })),
            { schema },
          ),
        )),
      );
      for (let n = 0; n < 60; n++) await one(n);
      await until(
        async () =>
          (await consumerRow(db.sql, schema, 'g8-consumer')).cursor === (await head(db.sql, schema)),
        30_000,
        'the consumer to reach the head',
      );
    } finally {
      await dispatcher.stop();
      await writer.end();
    }
    const regressions = await cursors.stop();
    // Order by the bigint column, not by the text output column of the same name ("10" < "9").
    const stored = await db.sql<{ id: string }[]>`select e.id::text as id from ${t.events} e order by e.id`;
    const storedIds = stored.map((r) => BigInt(r.id));
    const appendedIds = appended.map((e) => e.id);
    const delivered = c.ids();
    const state = await consumerRow(db.sql, schema, 'g8-consumer');
    const shown = await createAdmin({ sql: db.sql, schema }).showConsumer('g8-consumer');
    const mismatches =
      appendedIds.filter((id, i) => id !== storedIds[i]).length +
      delivered.filter((id, i) => id !== storedIds[i]).length;
    const crosses = (b: bigint) => storedIds.some((id) => id < b) && storedIds.some((id) => id >= b);

    figures['events'] = storedIds.length;
    figures['id span'] = `${storedIds[0]}…${storedIds[storedIds.length - 1]}`;
    figures['crosses 1e9'] = crosses(1_000_000_000n) ? 'yes' : 'no';
    figures['crosses 2^53'] = crosses(2n ** 53n) ? 'yes' : 'no';
    figures['delivered'] = delivered.length;
    figures['inversions'] = inversions(c);
    figures['duplicated'] = delivered.length - new Set(delivered).size;
    figures['id mismatches (append ↔ stored ↔ delivered)'] = mismatches;
    figures['cursor regressions'] = regressions;
    figures['final cursor'] = state.cursor.toString();

    expect(crosses(1_000_000_000n) && crosses(2n ** 53n + 1n)).toBe(true);
    expect(storedIds).toContain(2n ** 53n + 1n);
    expect(appendedIds).toEqual(storedIds);
    expect(delivered).toEqual(storedIds); // exact, each once, ascending: 0 inversions
    expect(inversions(c)).toBe(0);
    expect(regressions).toBe(0);
    expect(state.cursor).toBe(storedIds[storedIds.length - 1]);
    expect(shown.cursor).toBe(storedIds[storedIds.length - 1]);
    expect(state.gapCount).toBe(0);
  });
});

// docs/reliability.md §5, C7 and C8: dispatcher processes that die inside a handler. C7: the handler's
// side effect happened, then SIGKILL before the turn's COMMIT: after a restart the event is
// delivered again (dups = exactly the handled part of the in-flight batch, lost = 0). C8: a handler
// that calls process.exit(1) on event X: a supervisor restarts the process each time, and the
// consumer must be dead after maxAttempts counted crashes (F6, I5) while another consumer keeps up;
// a crash in a turn with a clean view of the consumer is not counted (docs/design.md §4.7).
import { setTimeout as sleep } from 'node:timers/promises';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { appendEvents, consumerRow, freshSchema, openTransaction, until } from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import { tables } from '@sluice/core/internal';
import { afterAll, beforeAll, expect, test } from 'vitest';
import type { CrashChildConfig, EffectLine } from './crash-child.js';
import { check, head, killChildren, ScenarioRecorder, startChild, type Child } from './support.js';

const db = await useTestDatabase();
const recorder = new ScenarioRecorder('scenarios-crash');
const CHILD = new URL('./crash-child.ts', import.meta.url);
let dir = '';

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sluice-crash-'));
});

afterAll(async () => {
  await killChildren();
  await recorder.write(db.sql);
  await rm(dir, { recursive: true, force: true });
});

async function effects(file: string): Promise<EffectLine[]> {
  const text = await readFile(file, 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as EffectLine);
}

function start(config: Omit<CrashChildConfig, 'parentPid'>): Child {
  return startChild(CHILD, config);
}

async function stopCleanly(child: Child): Promise<void> {
  child.kill('SIGTERM');
  const exit = await Promise.race([child.exited, sleep(15_000).then(() => undefined)]);
  check(
    exit !== undefined && exit.code === 0,
    `the child did not stop cleanly: ${JSON.stringify(exit)}\n${child.output().slice(-1500)}`,
  );
}

test('C7: SIGKILL after the side effect, before COMMIT: that batch again, nothing lost', async () => {
  await recorder.run('C7', 'Crash after side effect, before COMMIT', ['I1', 'I3'], async (figures) => {
    const schema = await freshSchema(db.sql, 'c7');
    const t = tables(db.sql, schema);
    const file = join(dir, 'c7.jsonl');
    const batchSize = 10;
    const appended = (await appendEvents(db.sql, 35, undefined, schema)).map((e) => e.id);
    const killId = appended[14]!; // the 5th event of the second batch
    const base = { url: db.url, schema, file, batchSize, maxAttempts: 5 };

    const first = start({ ...base, generation: 1, killOnId: killId.toString() });
    const exit = await first.exited;
    figures['first process exit'] = exit.signal ?? `code ${exit.code}`;
    check(
      exit.signal === 'SIGKILL',
      `expected the handler's SIGKILL, got ${JSON.stringify(exit)}\n${first.output().slice(-1500)}`,
    );
    const afterCrash = await consumerRow(db.sql, schema, 'side-effects');
    // The crashed turn is the process's second: it had a clean view of the consumer and recorded no
    // start (docs/design.md §4.7). Its batch began right after the cursor it left.
    const [marker] = await db.sql<{ first: string }[]>`
      select first_event_id::text as first from ${t.turnStarts} where consumer_name = 'side-effects'`;
    figures['turn start recorded for the crashed turn'] = marker
      ? `yes (from ${marker.first})`
      : 'no (a clean view)';
    const inFlight = { first: afterCrash.cursor + 1n, last: afterCrash.cursor + BigInt(batchSize) };
    figures['in-flight batch'] = `${inFlight.first}–${inFlight.last}`;
    figures['cursor after the crash'] = afterCrash.cursor.toString();

    const second = start({ ...base, generation: 2 });
    await second.announced('READY');
    await until(
      async () => (await consumerRow(db.sql, schema, 'side-effects')).cursor === (await head(db.sql, schema)),
      30_000,
      'the restarted process to catch up',
      50,
    );
    await stopCleanly(second);

    const lines = (await effects(file)).filter((l) => l.c === 'side-effects');
    const counts = new Map<string, number>();
    for (const line of lines) counts.set(line.id, (counts.get(line.id) ?? 0) + 1);
    const dups = [...counts.entries()].filter(([, n]) => n > 1).map(([id]) => BigInt(id));
    const lost = appended.filter((id) => !counts.has(id.toString()));
    const expectedDups = appended.filter((id) => id >= inFlight.first && id <= killId);
    figures['side effects before the kill'] = lines.filter((l) => l.g === 1).length;
    figures['duplicated events'] = dups.length;
    figures['duplicates'] = dups.length > 0 ? `${dups[0]}–${dups[dups.length - 1]}` : 'none';
    figures['max deliveries of one event'] = Math.max(...counts.values());
    figures['lost'] = lost.length;
    figures['attempt seen on redelivery of the first in-flight event'] =
      lines.find((l) => l.g === 2 && l.id === inFlight.first.toString())?.a ?? 0;

    expect(afterCrash.cursor).toBe(appended[9]); // the first batch committed, the crashed turn nothing
    expect(killId >= inFlight.first && killId <= inFlight.last).toBe(true);
    expect(lost).toEqual([]);
    expect(dups).toEqual(expectedDups); // exactly the handled part of the in-flight batch
    expect(Math.max(...counts.values())).toBe(2);
  });
});

/**
 * Runs a supervisor over crash-child.ts until `side-effects` is dead: every exit is a crash and
 * is followed by a restart. Returns the crashes and the child still running.
 */
async function superviseUntilDead(
  config: Omit<CrashChildConfig, 'parentPid' | 'generation'>,
  earlier: readonly string[] = [],
) {
  const exits: string[] = [...earlier];
  for (let generation = exits.length + 1; generation <= 12; generation++) {
    const child = start({ ...config, generation });
    const outcome = await Promise.race([
      child.exited.then((exit) => ({ exit })),
      until(
        async () =>
          (await consumerRow(db.sql, config.schema, 'side-effects').catch(() => undefined))?.status ===
          'dead',
        120_000,
        'the consumer to die or the process to exit',
        25,
      ).then(() => ({ dead: true as const })),
    ]);
    if ('dead' in outcome) return { crashes: exits.length, exits, child };
    exits.push(outcome.exit.signal ?? `exit ${outcome.exit.code}`);
  }
  throw new Error(`side-effects is not dead after ${exits.length} crashes (${exits.join(', ')})`);
}

for (const position of ['first in its batch', 'mid-batch'] as const) {
  test(`C8 (poison ${position}): process.exit(1) in the handler; dead after maxAttempts counted crashes, one more uncounted`, async () => {
    const id = position === 'first in its batch' ? 'C8' : 'C8-mid';
    await recorder.run(id, `Crash-poison (event ${position})`, ['I5'], async (figures) => {
      const maxAttempts = 3;
      const batchSize = 10;
      const schema = await freshSchema(db.sql, 'c8');
      const file = join(dir, `c8-${id}.jsonl`);
      const appended = (await appendEvents(db.sql, 25, undefined, schema)).map((e) => e.id);
      // 11 starts the second batch; 15 sits inside it.
      const poison = position === 'first in its batch' ? appended[10]! : appended[14]!;
      const { crashes, exits, child } = await superviseUntilDead({
        url: db.url,
        schema,
        file,
        batchSize,
        maxAttempts,
        exitOnId: poison.toString(),
      });
      figures['maxAttempts'] = maxAttempts;
      figures['poison event'] = `${poison} (batches of ${batchSize} from 1)`;
      figures['crashes until dead'] = crashes;
      figures['exits'] = [...new Set(exits)].join(', ');

      // The survivor keeps going: new events reach the bystander, the dead consumer stays frozen.
      const dead = await consumerRow(db.sql, schema, 'side-effects');
      const more = (await appendEvents(db.sql, 10, undefined, schema)).map((e) => e.id);
      await until(
        async () => (await consumerRow(db.sql, schema, 'bystander')).cursor === more[more.length - 1],
        30_000,
        'the bystander to keep up',
        25,
      );
      // One more event the bystander must reach: the surviving process has taken its passes since
      // (the dead consumer's among them), and the dead one must not have moved meanwhile.
      const [last] = await appendEvents(db.sql, 1, undefined, schema);
      await until(
        async () => (await consumerRow(db.sql, schema, 'bystander')).cursor === last?.id,
        30_000,
        'the bystander to reach one more event',
        25,
      );
      const frozen = await consumerRow(db.sql, schema, 'side-effects');
      await stopCleanly(child);
      const lines = await effects(file);
      const bystanderIds = new Set(lines.filter((l) => l.c === 'bystander').map((l) => BigInt(l.id)));
      const poisonCalls = lines.filter((l) => l.c === 'side-effects' && l.id === poison.toString());
      figures['handler calls on the poison event'] = poisonCalls.length;
      figures['attempt numbers seen on it'] = poisonCalls.map((l) => l.a).join(',');
      figures['dead consumer: status / attempts / cursor / stuck'] =
        `${frozen.status} / ${frozen.attempts} / ${frozen.cursor} / ${frozen.stuckEventId}`;
      figures['bystander lost'] = [...appended, ...more].filter((e) => !bystanderIds.has(e)).length;

      expect(dead).toMatchObject({
        status: 'dead',
        attempts: maxAttempts,
        stuckEventId: poison,
        cursor: poison - 1n,
      });
      expect(frozen).toEqual(dead); // I5: frozen while the process keeps running
      expect([...appended, ...more].filter((e) => !bystanderIds.has(e))).toEqual([]);
      // F6 target: dead after maxAttempts counted crashes. The first process reaches the poison
      // in its second turn, with a clean view of the consumer (its own first turn wrote the row):
      // that turn records no start, so its crash is not counted (docs/design.md §4.7). Every
      // later process dies in its first turn, which records its start.
      figures['crashes not counted (the first process had a clean view)'] = crashes - maxAttempts;
      check(
        crashes === maxAttempts + 1,
        `dead after ${crashes} crashes, not maxAttempts + 1 = ${maxAttempts + 1}: the handler ran ${poisonCalls.length} times on ` +
          `poison ${poison} (attempt numbers ${poisonCalls.map((l) => l.a).join(',')})`,
      );
    });
  });
}

test("T3: a 'now' consumer's straggler that kills the process: dead after maxAttempts counted crashes", async () => {
  await recorder.run('T3', "'now' consumer: crash-poison straggler", ['I5', 'I1'], async (figures) => {
    const maxAttempts = 3;
    const schema = await freshSchema(db.sql, 't3');
    const file = join(dir, 't3.jsonl');
    await appendEvents(db.sql, 5, undefined, schema); // history
    // The poison event is in flight when the consumer registers; a later event commits above it.
    const writer = await openTransaction(db.sql);
    const [poison] = await writer.append([{ streamId: 'p', type: 'Poison', data: {} }], { schema });
    await appendEvents(db.sql, 1, undefined, schema);
    const config = {
      url: db.url,
      schema,
      file,
      batchSize: 10,
      maxAttempts,
      startFromNow: true,
      exitOnId: poison!.id.toString(),
    };
    const first = start({ ...config, generation: 1 });
    await first.announced('READY');
    await writer.commit(); // the straggler is due once this transaction has ended
    const firstExit = await first.exited;
    const { crashes, exits, child } = await superviseUntilDead(config, [
      firstExit.signal ?? `exit ${firstExit.code}`,
    ]);
    const dead = await consumerRow(db.sql, schema, 'side-effects');
    await stopCleanly(child);
    const calls = (await effects(file)).filter(
      (l) => l.c === 'side-effects' && l.id === poison!.id.toString(),
    );
    figures['maxAttempts'] = maxAttempts;
    figures['crashes until dead'] = crashes;
    figures['handler calls on the straggler'] = calls.length;
    figures['attempt numbers seen on it'] = calls.map((l) => l.a).join(',');
    figures['dead consumer: status / attempts / stuck'] =
      `${dead.status} / ${dead.attempts} / ${dead.stuckEventId}`;
    expect(exits.every((e) => e === 'exit 1')).toBe(true);
    expect(dead).toMatchObject({ status: 'dead', attempts: maxAttempts, stuckEventId: poison!.id });
    // At most one more: a process with a clean view of the consumer records no start before it
    // delivers (docs/design.md §4.7).
    figures['crashes not counted (a clean view)'] = crashes - maxAttempts;
    check(
      crashes === maxAttempts || crashes === maxAttempts + 1,
      `dead after ${crashes} crashes, not maxAttempts = ${maxAttempts} (or one more)`,
    );
  });
});

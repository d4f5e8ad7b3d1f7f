// Lock takeover (docs/design.md §5.4, docs/reliability.md#t1): two dispatcher instances
// contend for one consumer row. Instance B's lock statement takes its snapshot, then stalls before
// the row lock; meanwhile instance A locks the row, delivers, records a hole whose writer is younger
// than B's statement, and commits. B's FOR UPDATE then finds the row updated by a committed
// transaction and proceeds on the new version (EvalPlanQual). Everything B decides on from then on
// must come from after its lock: the fence it gives A's hole must be an xid allocated after A's
// observation (else the hole burns while its writer is still open), and the gap watch and the rest
// of the state it saves must not come from its stale statement snapshot (else a late commit waits
// for an unrelated transaction to end).
//
// The window is widened on purpose, never by sleeping: B connects as a role subject to row-level
// security, and a policy function parks B's lock statement on an advisory lock the test holds, at
// the last table that statement reads before it locks the row. The statement then resumes when the
// test lets it, exactly once, whatever the timing.
import {
  appendEvents,
  consumerRow,
  freshSchema,
  gate,
  openTransaction,
  passUntil,
  recordingConsumer,
  type OpenTransaction,
  until,
} from '@sluice/testing';
import { heldTransaction, useLoginRole, useTestDatabase } from '@sluice/testing/vitest';
import { describe, expect, onTestFinished, test } from 'vitest';
import { rangesOf, testDispatcher } from '../test-support.js';

const db = await useTestDatabase();
const PARK_LOCK = 771_001;
const parked = useLoginRole(db, 'sluice_parked', { max: 6 });
const role = parked.name;

/**
 * Which statement of the parked role parks: its turn's lock statement (on the gaps table when that
 * statement reads it, its select list has run by then; else on the consumers scan), or the record
 * of a timed-out transactional attempt, made after its turn was rolled back (on the consumers scan
 * of its UPDATE, before the row is locked), or the row read that follows the lock.
 */
const PARKED_STATEMENT = {
  lock: `current_query() ilike '%skip locked%'
         and (relation = 'gaps' or current_query() not like '%."gaps"%')`,
  'failure-record': `relation = 'consumers' and current_query() ilike '%set attempts = %failure_category = $%'`,
  // The row read that follows the lock (queries/consumers.ts, lockConsumer), at its read of the gaps:
  // its snapshot is taken by then.
  'row-read': `relation = 'gaps' and current_query() ilike '%max(g.fence)%'`,
} as const;

/** Lets the parked role use `schema`, with policies that park `statement` when that role runs it. */
async function installParking(
  schema: string,
  statement: keyof typeof PARKED_STATEMENT = 'lock',
): Promise<void> {
  await parked.grant(schema);
  await db.sql.unsafe(`
    create function "${schema}".park_lock_statement(relation text) returns boolean
      volatile language plpgsql as $$
    begin
      if current_user = '${role}' and ${PARKED_STATEMENT[statement]} then
        perform pg_advisory_xact_lock_shared(${PARK_LOCK});
      end if;
      return true;
    end $$;
    alter table "${schema}".consumers enable row level security;
    alter table "${schema}".gaps enable row level security;
    create policy park on "${schema}".consumers to "${role}"
      using ("${schema}".park_lock_statement('consumers')) with check (true);
    create policy park on "${schema}".gaps to "${role}"
      using ("${schema}".park_lock_statement('gaps')) with check (true);`);
}

/**
 * A fresh schema whose consumer 'projection' two instances run: A as the owner, B as the parked
 * role, whose `statement` parks.
 */
async function twoInstances(statement: keyof typeof PARKED_STATEMENT) {
  const schema = await freshSchema(db.sql);
  await installParking(schema, statement);
  const consumer = recordingConsumer('projection');
  const a = testDispatcher(db.sql, schema, [consumer.consumer]);
  const b = testDispatcher(parked.sql(), schema, [consumer.consumer]);
  await a.ensureRegistered();
  await b.ensureRegistered();
  return { schema, consumer, a, b };
}

/**
 * Holds the advisory lock the policies park on, starts `run` (a turn whose statement parks), and
 * once it has parked runs `meanwhile`; then lets the statement go and waits for `run`.
 */
async function whileParked(
  run: () => Promise<unknown>,
  what: string,
  meanwhile: () => Promise<void>,
): Promise<void> {
  const holder = await db.sql.reserve();
  await holder`select pg_advisory_lock(${PARK_LOCK})`;
  try {
    const running = run();
    await until(async () => (await parked.parked()) === 1, 10_000, what);
    await meanwhile();
    await holder`select pg_advisory_unlock(${PARK_LOCK})`;
    await running;
  } finally {
    await holder`select pg_advisory_unlock_all()`;
    holder.release();
  }
}

interface Takeover {
  schema: string;
  /** The xid of the writer whose event A found missing while B waited. */
  writerXid: bigint;
  /** The event id that writer holds. */
  lateId: bigint;
  commitWriter: () => Promise<void>;
  a: ReturnType<typeof testDispatcher>;
  seen: () => bigint[];
}

/**
 * The takeover schedule. Before it, the consumer has a burnable pending range (so the gaps table
 * has a row for it); `beforeB` runs first (an unrelated long transaction, say).
 */
async function takeover(beforeB?: () => Promise<void>): Promise<Takeover> {
  const { schema, consumer, a, b } = await twoInstances('lock');

  // A pending range that a later turn may burn: event 1's writer rolls back after 2 commits.
  const rolledBack = await openTransaction(db.sql);
  await rolledBack.append([{ streamId: 's', type: 'Rolled', data: {} }], { schema });
  await appendEvents(db.sql, 1, undefined, schema);
  await a.runOnce();
  await rolledBack.rollback();
  await a.runOnce(); // fences [1, 1] with this turn's xid
  expect((await rangesOf(db.sql, schema, 'projection')).map((r) => r.from)).toEqual([1n]);

  await beforeB?.();
  // Made while B waits.
  const late: { writer?: OpenTransaction; xid: bigint; id: bigint } = { xid: 0n, id: 0n };
  await whileParked(
    () => b.runOnce(),
    "B's lock statement to park",
    async () => {
      // While B waits: a writer younger than B's statement holds event 3, event 4 commits, and A
      // takes a whole turn (delivers 4, records the hole at 3) and commits.
      const writer = await openTransaction(db.sql);
      onTestFinished(() => writer.rollback()); // a no-op once it has committed
      late.writer = writer;
      late.xid = await writer.xid();
      const [held] = await writer.append([{ streamId: 's', type: 'Late', data: {} }], { schema });
      late.id = held?.id ?? 0n;
      await appendEvents(db.sql, 1, undefined, schema);
      await a.runOnce();
      expect(consumer.ids()).toContain(4n);
    },
  );
  const { writer } = late;
  if (!writer) throw new Error("the late writer was not opened while B's statement was parked");
  return {
    schema,
    writerXid: late.xid,
    lateId: late.id,
    commitWriter: () => writer.commit(),
    a,
    seen: () => consumer.ids(),
  };
}

describe('lock takeover: a turn decides only on what it reads once its row is held', () => {
  test("the hole another instance recorded meanwhile gets a fence above its writer's xid, and its event is delivered", async () => {
    const t = await takeover();
    const hole = (await rangesOf(db.sql, t.schema, 'projection')).find((r) => r.from === t.lateId);
    expect(hole?.fence, 'the hole is fenced by the turn that took the row over').not.toBeNull();
    expect(hole?.fence).toBeGreaterThan(t.writerXid);

    // The horizon moves on while the writer is still open: nothing may burn its id.
    await db.sql`select pg_current_xact_id()`;
    await t.a.runOnce();
    await t.a.runOnce();
    expect((await rangesOf(db.sql, t.schema, 'projection')).map((r) => r.from)).toContain(t.lateId);

    await t.commitWriter();
    await t.a.runOnce();
    await t.a.runOnce();
    expect(t.seen()).toContain(t.lateId);
  });

  test('the late event is delivered while an unrelated long transaction stays open', async () => {
    const t = await takeover(async () => {
      const long = await heldTransaction(db.sql);
      await long.xid(); // holds the cluster's xmin below every fence of the test
    });
    await t.commitWriter();
    await passUntil(
      t.a,
      () => t.seen().includes(t.lateId),
      'the late event while the long transaction is open',
      5_000,
    );
  });
});

describe("a turn's fetch reads a newer snapshot than its row read", () => {
  // The turn chooses which pending ranges to re-fetch by the snapshot of its row read; its fetch is
  // a later statement. Here the watched writer of a pending id commits between the two, and an
  // event of the same stream is appended after it: the fetch sees both.
  test('a pending event whose writer ended in between is delivered in the same turn, before the events appended after it', async () => {
    const { schema, consumer, a, b } = await twoInstances('row-read');

    // Event 1 (stream k) stays uncommitted while event 2 commits: A passes 1, then fences it
    // watching its writer. Event 3 gives B's turn something to do.
    const writer = await openTransaction(db.sql);
    onTestFinished(() => writer.rollback()); // a no-op once it has committed
    await writer.append([{ streamId: 'k', type: 'First', data: {} }], { schema });
    await appendEvents(db.sql, 1, undefined, schema);
    await a.runOnce();
    await a.runOnce();
    expect((await rangesOf(db.sql, schema, 'projection')).map((r) => [r.from, r.fence !== null])).toEqual([
      [1n, true],
    ]);
    await appendEvents(db.sql, 1, undefined, schema);

    await whileParked(
      () => b.runOnce(),
      "B's row read to park",
      async () => {
        // B's row read has its snapshot, with event 1's writer running. Now it commits, and only
        // then is event 4 of the same stream appended.
        await writer.commit();
        await appendEvents(db.sql, 1, () => ({ streamId: 'k', type: 'Second', data: {} }), schema);
      },
    );
    expect(consumer.ids()).toEqual([2n, 1n, 3n, 4n]);
    expect(await rangesOf(db.sql, schema, 'projection')).toEqual([]);
  });
});

describe('a failure recorded after its turn ended lands only on the row that turn held', () => {
  test('a transactional handler times out while another instance takes the row over and delivers the event: the consumer stays as that instance left it', async () => {
    const schema = await freshSchema(db.sql);
    await installParking(schema, 'failure-record');
    const hanging = gate();
    onTestFinished(hanging.open);
    // Instance A's handler overruns its time: its turn is rolled back, and its attempt is recorded
    // afterwards, by a statement that parks before it reaches the row.
    const a = testDispatcher(parked.sql(), schema, [
      {
        name: 'projection',
        transactional: true,
        handlerTimeoutMs: 200,
        errorPolicy: { maxAttempts: 3 },
        handler: () => hanging.promise,
      },
    ]);
    const atB = recordingConsumer('projection', { transactional: true, errorPolicy: { maxAttempts: 3 } });
    const b = testDispatcher(db.sql, schema, [atB.consumer]);
    await a.ensureRegistered();
    await b.ensureRegistered();
    await appendEvents(db.sql, 1, undefined, schema);

    await whileParked(
      () => a.runOnce(),
      "A's failure record to park",
      async () => {
        // Meanwhile B takes the row (A's turn has rolled back) and delivers the event.
        await b.runOnce();
        expect(atB.ids()).toEqual([1n]);
        expect(await consumerRow(db.sql, schema, 'projection')).toMatchObject({
          cursor: 1n,
          attempts: 0,
          stuckEventId: null,
        });
      },
    );
    // A's record was decided on the row before B's turn: it must not mark the consumer stuck on an
    // event B delivered (it would wait out a retry delay, and count towards dead, for nothing).
    expect(await consumerRow(db.sql, schema, 'projection')).toMatchObject({
      status: 'idle',
      cursor: 1n,
      attempts: 0,
      stuckEventId: null,
    });
    await b.runOnce();
    expect(atB.ids()).toEqual([1n]);
  });

  test("a transactional handler times out while another instance takes the row over: that instance counts no crash, and a later event's one failure is its first attempt", async () => {
    const schema = await freshSchema(db.sql);
    await installParking(schema, 'failure-record');
    const hanging = gate();
    onTestFinished(hanging.open);
    const policy = { transactional: true, errorPolicy: { maxAttempts: 2 } } as const;
    // A's handler overruns its time on event 3: its turn (events 1 to 5) is rolled back, and the
    // record of its attempt parks before it reaches the row.
    const a = testDispatcher(parked.sql(), schema, [
      {
        name: 'projection',
        ...policy,
        handlerTimeoutMs: 200,
        handler: (event) => (event.id === 3n ? hanging.promise : undefined),
      },
    ]);
    // B's handler fails once on event 4, for a reason of its own.
    const delivered: bigint[] = [];
    const attempts: number[] = [];
    const b = testDispatcher(db.sql, schema, [
      {
        name: 'projection',
        ...policy,
        handler: (event, ctx) => {
          if (event.id === 4n) {
            attempts.push(ctx.attempt);
            if (attempts.length === 1) throw new Error('not yet');
          }
          delivered.push(event.id);
        },
      },
    ]);
    await a.ensureRegistered();
    await b.ensureRegistered();
    await appendEvents(db.sql, 5, undefined, schema);

    await whileParked(
      () => a.runOnce(),
      "A's failure record to park",
      async () => {
        // A's turn has rolled back: B takes the row. A's turn start must not read as a crash.
        await passUntil(b, () => attempts.length >= 1, "event 4's failure at B");
      },
    );
    await passUntil(b, () => delivered.includes(5n), 'B delivers up to 5');
    expect(attempts).toEqual([1, 2]);
    expect(await consumerRow(db.sql, schema, 'projection')).toMatchObject({
      status: 'idle',
      cursor: 5n,
      attempts: 0,
    });
    expect([...new Set(delivered)].sort((x, y) => (x < y ? -1 : 1))).toEqual([1n, 2n, 3n, 4n, 5n]);
  });
});

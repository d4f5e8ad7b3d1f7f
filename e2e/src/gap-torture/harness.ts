// Real sessions for the gap torture (docs/reliability.md §6.1): four writer sessions, a foreign session
// in another database, two dispatcher instances, all driven one SQL step at a time by fast-check
// commands, so the interleaving is exactly the generated one and replays from seed and path.
import { randomBytes } from 'node:crypto';
import {
  createDispatcher,
  migrate,
  silentLogger,
  type Dispatcher,
  type Logger,
  type Sql,
} from '@sluice/core';
import { listRanges, parseLaneInstanceId, requestLaneChange, tables } from '@sluice/core/internal';
import type postgres from 'postgres';
import { TortureModel } from './model.js';
import { switchboard, type Mutant } from './switchboard.js';

export const WRITERS = 4;
export const CONSUMERS = [
  { name: 'fast', strict: false, lanes: 1 },
  { name: 'strict', strict: true, lanes: 1 },
  // Run as lanes (docs/design.md §11), its lane count changed by Relane commands: every lane is a
  // consumer row of its own, fenced, burnt and locked like the others.
  { name: 'laned', strict: false, lanes: 2 },
] as const;

/** The lane counts a Relane command moves the laned consumer to. */
export const LANE_COUNTS = [1, 2, 3] as const;

export interface WriterState {
  inTx: boolean;
  hasXid: boolean;
  reserved: bigint[];
  inserted: bigint[];
}

export interface Pools {
  readonly admin: Sql;
  readonly writers: Sql;
  /**
   * Connected as `dispatcherRole`. The dispatcher opens its own connections from these options,
   * named `sluice:torture-<instance>` after its instance id: the parking policy keys on that name.
   */
  readonly dispatchers: readonly [Sql, Sql];
  readonly foreign: Sql;
  /** A role without superuser rights: row-level security applies to it (see parking below). */
  readonly dispatcherRole: string;
}

/**
 * Advisory lock keys (base + instance) a dispatcher instance's lock statements wait on, shared, in
 * a row-level-security policy: while the harness holds one exclusively, that instance's turns stop
 * inside their lock statement, after its snapshot and before the row lock (see passParked).
 */
const PARK_LOCK_BASE = 772_000;

/** A pass of one instance, stopped inside its turns' lock statements until resumed. */
interface ParkedPass {
  readonly instance: number;
  readonly pass: Promise<unknown>;
  readonly holder: postgres.ReservedSql;
}

/** JSON on one line, bigints as their digits. */
function jsonLine(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => (typeof v === 'bigint' ? String(v) : v));
}

/** One run's world: a fresh schema, its dispatchers, the writer sessions and the model. */
export class TortureRun {
  readonly model = new TortureModel(CONSUMERS);
  readonly writers: WriterState[] = Array.from({ length: WRITERS }, () => ({
    inTx: false,
    hasXid: false,
    reserved: [],
    inserted: [],
  }));
  foreignHolding = false;
  cacheSize = 1;
  /** laneOfWriter[count][writer]: the lane of writer w's stream (`w<w>`) among `count` lanes. */
  laneOfWriter: number[][] = [];
  /** Relane commands that started or retargeted a change of the laned consumer's lanes. */
  relanes = 0;
  parked: ParkedPass | null = null;
  /** PassParked steps whose pass really stopped in its lock statement (not ended without a turn). */
  parkedStops = 0;
  private sessions: postgres.ReservedSql[] = [];
  private foreignSession: postgres.ReservedSql | undefined;
  dispatchers: Dispatcher[] = [];
  readonly log: string[] = [];
  /** What the dispatchers logged (info and above), in order: printed with a failure. */
  readonly said: string[] = [];

  readonly pools: Pools;
  readonly schema: string;
  readonly mutant: Mutant | null;

  private constructor(pools: Pools, schema: string, mutant: Mutant | null) {
    this.pools = pools;
    this.schema = schema;
    this.mutant = mutant;
  }

  static async start(pools: Pools, mutant: Mutant | null): Promise<TortureRun> {
    const schema = `gt_${randomBytes(5).toString('hex')}`;
    const run = new TortureRun(pools, schema, mutant);
    switchboard().mutant = mutant;
    switchboard().afterFetch = null;
    await migrate(pools.admin, { schema, logger: silentLogger });
    if (mutant === 'no-xid-first')
      await pools.admin.unsafe(`drop trigger events_assign_xid on "${schema}".events`);
    if (mutant === 'cached-sequence') {
      await pools.admin.unsafe(`alter sequence "${schema}".events_id_seq cache 20`);
      run.cacheSize = 20;
    }
    await run.installParking();
    // nextval() takes an xid when it WAL-logs the sequence (its first call): draw it here, so
    // reservers in the run behave like the common case.
    await pools.admin`select nextval(${`${schema}.events_id_seq`}::regclass)`;
    run.sessions = await Promise.all(Array.from({ length: WRITERS }, () => pools.writers.reserve()));
    run.foreignSession = await pools.foreign.reserve();
    run.dispatchers = pools.dispatchers.map((sql, instance) =>
      createDispatcher({
        sql,
        schema,
        logger: run.dispatcherLogger(instance),
        listen: false,
        retryDelayMs: 0,
        instanceId: `torture-${instance}`,
        consumers: CONSUMERS.map((c) => ({
          name: c.name,
          lanes: c.lanes,
          ordering: c.strict ? 'strict' : 'fast',
          batchSize: 3, // small: fetches are often cut by LIMIT
          handler: (event) => {
            run.model.deliver(c.name, event.id);
          },
        })),
      }),
    );
    for (const d of run.dispatchers) await d.ensureRegistered();
    // The lane of each writer's stream, as the fetch computes it, for every count Relane uses.
    for (const count of LANE_COUNTS) {
      const rows = await pools.admin<{ lane: number }[]>`
        select abs(hashtextextended('w' || w, 0) % ${count})::int as lane
        from generate_series(0, ${WRITERS - 1}) as w order by w`;
      run.laneOfWriter[count] = rows.map((r) => r.lane);
    }
    return run;
  }

  /**
   * What a dispatcher says beyond debug, noted apart from the steps: a failed turn (which backs its
   * consumer off for a second, longer than quiescence waits) or a lane step shows in a failure.
   */
  dispatcherLogger(instance: number): Logger {
    const note = (level: string) => (fields: object, message: string) => {
      this.said.push(`[dispatcher ${instance} ${level}] ${message} ${jsonLine(fields)}`);
    };
    return { debug: () => undefined, info: note('info'), warn: note('warn'), error: note('error') };
  }

  /** Asks for the laned consumer to run as `lanes` lanes (docs/design.md §11.3), as an operator would. */
  async relane(lanes: number): Promise<void> {
    const t = tables(this.pools.admin, this.schema);
    try {
      const change = await requestLaneChange(this.pools.admin, t, this.schema, 'laned', lanes, 'torture');
      if (change.outcome === 'started' || change.outcome === 'retargeted') this.relanes += 1;
    } catch (error) {
      // A switched change still drains: the command changes nothing (as an operator's 409).
      if ((error as { code?: string }).code !== 'SLUICE_LANE_CHANGE_IN_PROGRESS') throw error;
    }
  }

  /**
   * Lets the dispatchers' role use the run's schema, and parks their lock statements on request: a
   * policy on the consumers table makes each lock statement (the one that says SKIP LOCKED) take
   * its instance's park lock, shared, while the row is scanned, before it is locked.
   */
  private async installParking(): Promise<void> {
    const schema = `"${this.schema}"`;
    const role = `"${this.pools.dispatcherRole}"`;
    await this.pools.admin.unsafe(`
      grant usage on schema ${schema} to ${role};
      grant select, insert, update, delete on all tables in schema ${schema} to ${role};
      grant usage, select on all sequences in schema ${schema} to ${role};
      create function ${schema}.park_lock_statement() returns boolean volatile language plpgsql as $$
      begin
        if current_query() ilike '%skip locked%' and current_setting('application_name') like 'sluice:torture-%' then
          perform pg_advisory_xact_lock_shared(
            ${PARK_LOCK_BASE} + substr(current_setting('application_name'), 16)::int);
        end if;
        return true;
      end $$;
      alter table ${schema}.consumers enable row level security;
      create policy park on ${schema}.consumers to ${role}
        using (${schema}.park_lock_statement()) with check (true);`);
  }

  session(w: number): postgres.ReservedSql {
    const s = this.sessions[w];
    if (!s) throw new Error(`no session ${w}`);
    return s;
  }

  // ---- steps (each one SQL step, awaited) --------------------------------------------------

  async begin(w: number): Promise<void> {
    await this.session(w)`begin`;
    this.writers[w] = { inTx: true, hasXid: false, reserved: [], inserted: [] };
  }

  async forceXid(w: number): Promise<void> {
    await this.session(w)`select pg_current_xact_id()`;
    (this.writers[w] as WriterState).hasXid = true;
  }

  async reserve(w: number): Promise<void> {
    const [row] = await this.session(w)<
      { id: string }[]
    >`select nextval(${`${this.schema}.events_id_seq`}::regclass)::text as id`;
    const id = BigInt(row?.id ?? '0');
    this.noteDraw(w, id);
    (this.writers[w] as WriterState).reserved.push(id);
  }

  async insert(w: number): Promise<void> {
    const state = this.writers[w] as WriterState;
    const t = tables(this.session(w), this.schema);
    const reserved = state.reserved.shift();
    let id: bigint;
    if (reserved !== undefined) {
      await this.session(w)`
        insert into ${t.events} (id, stream_id, type, data) overriding system value
        values (${reserved.toString()}::bigint, ${`w${w}`}, 'Torture', '{}'::jsonb)`;
      id = reserved;
    } else {
      const [row] = await this.session(w)<{ id: string }[]>`
        insert into ${t.events} (stream_id, type, data) values (${`w${w}`}, 'Torture', '{}'::jsonb) returning id::text`;
      id = BigInt(row?.id ?? '0');
      this.noteDraw(w, id);
    }
    state.inserted.push(id);
    state.hasXid = true;
  }

  async end(w: number, commit: boolean): Promise<void> {
    const state = this.writers[w] as WriterState;
    // The fate is noted before the statement is sent: a turn running at the same time (a pass's
    // turns run concurrently, and a mid-turn commit runs inside one of them) may see the commit
    // before this call returns, and deliver the ids at once.
    this.model.ended(w, state.inserted, commit);
    await (commit ? this.session(w)`commit` : this.session(w)`rollback`);
    this.writers[w] = { inTx: false, hasXid: false, reserved: [], inserted: [] };
  }

  async foreign(hold: boolean): Promise<void> {
    const s = this.foreignSession as postgres.ReservedSql;
    if (hold) {
      await s`begin`;
      await s`select pg_current_xact_id()`;
    } else {
      await s`commit`;
    }
    this.foreignHolding = hold;
  }

  async burnXids(count: number): Promise<void> {
    for (let i = 0; i < count; i++) await this.pools.admin`select pg_current_xact_id()`;
  }

  /** One dispatcher pass; `midTurn` runs right after the first fetch statement of the pass. */
  async pass(instance: number, midTurn?: () => Promise<void>): Promise<void> {
    const hook = { ran: false };
    if (midTurn) {
      switchboard().afterFetch = async () => {
        hook.ran = true;
        await midTurn();
      };
    }
    try {
      await (this.dispatchers[instance] as Dispatcher).runOnce();
    } finally {
      switchboard().afterFetch = null;
    }
    if (midTurn && !hook.ran) await midTurn(); // no turn fetched: the step still happens, after the pass
    await this.observe();
  }

  /**
   * Starts a pass of `instance` that stops inside its turns' lock statements (their snapshot taken,
   * no row locked yet) and returns once it has stopped there, or has ended without a turn. Later
   * commands run while it waits; {@link resume} lets it go on (another instance may have taken the
   * row and committed meanwhile: the lock then proceeds on the new row version).
   */
  async passParked(instance: number): Promise<void> {
    const holder = await this.pools.admin.reserve();
    await holder`select pg_advisory_lock(${PARK_LOCK_BASE + instance})`;
    const pass = (this.dispatchers[instance] as Dispatcher).runOnce();
    const state = { settled: false };
    pass.then(
      () => (state.settled = true),
      () => (state.settled = true),
    );
    this.parked = { instance, pass, holder };
    for (;;) {
      if (state.settled) break;
      const [row] = await this.pools.admin<{ n: number }[]>`
        select count(*)::int as n from pg_stat_activity
        where application_name = ${`sluice:torture-${instance}`} and wait_event_type = 'Lock' and wait_event = 'advisory'`;
      if ((row?.n ?? 0) > 0) {
        this.parkedStops += 1;
        break;
      }
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  /** Lets the parked pass go on and waits for it. */
  async resume(): Promise<void> {
    const parked = this.parked;
    if (!parked) return;
    this.parked = null;
    try {
      await parked.holder`select pg_advisory_unlock(${PARK_LOCK_BASE + parked.instance})`;
    } finally {
      parked.holder.release();
    }
    await parked.pass;
    await this.observe();
  }

  async observe(): Promise<void> {
    const t = tables(this.pools.admin, this.schema);
    for (const c of CONSUMERS) {
      if (c.name === 'laned') {
        await this.observeLanes(c.name);
        continue;
      }
      const [row] = await this.pools.admin<{ cursor: string }[]>`
        select cursor::text from ${t.consumers} where name = ${c.name} and instance_id = '*'`;
      const ranges = await this.pools.admin.begin((tx) => listRanges(tx, t, c.name, '*'));
      const pending = new Set<bigint>();
      for (const r of ranges)
        for (let id = r.from; id <= r.to && id - r.from < 10_000n; id++) pending.add(id);
      this.model.observe(c.name, BigInt(row?.cursor ?? '0'), pending);
    }
  }

  /** Every row of a laned consumer (both lane counts while its count changes), with its ranges. */
  private async observeLanes(name: string): Promise<void> {
    const t = tables(this.pools.admin, this.schema);
    const rows = await this.pools.admin<{ instance_id: string; cursor: string }[]>`
      select instance_id, cursor::text from ${t.consumers} where name = ${name} order by instance_id`;
    const observed = [];
    for (const row of rows) {
      const lane = parseLaneInstanceId(row.instance_id);
      if (!lane) continue;
      const ranges = await this.pools.admin.begin((tx) => listRanges(tx, t, name, row.instance_id));
      const pending = new Set<bigint>();
      for (const r of ranges)
        for (let id = r.from; id <= r.to && id - r.from < 10_000n; id++) pending.add(id);
      observed.push({ instanceId: row.instance_id, ...lane, cursor: BigInt(row.cursor), pending });
    }
    this.model.observeLanes(name, observed, (writer, count) => this.laneOfWriter[count]?.[writer] ?? -1);
  }

  private noteDraw(w: number, id: bigint): void {
    this.model.drawn(id, w);
    if (this.cacheSize > 1 && !this.model.cachedBy.has(id)) {
      // A new block: the session now holds the next cacheSize - 1 values for later transactions.
      for (let k = 1n; k < BigInt(this.cacheSize); k++) this.model.cachedBy.set(id + k, w);
    }
  }

  /**
   * Quiescence (docs/reliability.md §6.4): end every transaction, free the horizon, pass until nothing
   * changes; then I1 and no gaps left.
   */
  async quiesce(): Promise<void> {
    await this.resume();
    for (let w = 0; w < WRITERS; w++) if (this.writers[w]?.inTx) await this.end(w, true);
    if (this.foreignHolding) await this.foreign(false);
    // Ids still cached by sessions will never be used now: release the sessions' caches.
    for (const s of this.sessions) await s`discard sequences`;
    this.model.cachedBy.clear();
    let quietRounds = 0;
    for (let round = 0; round < 60 && quietRounds < 2; round++) {
      const before = JSON.stringify([...this.model.delivered.values()].map((l) => l.length));
      await this.burnXids(1);
      for (let i = 0; i < this.dispatchers.length; i++) await this.pass(i);
      const pending = await this.pendingRanges();
      const after = JSON.stringify([...this.model.delivered.values()].map((l) => l.length));
      quietRounds = before === after && pending === 0 ? quietRounds + 1 : 0;
    }
    this.model.quiescent();
    const left = await this.pendingRanges();
    if (left > 0)
      this.model.violations.push({
        invariant: 'I1',
        message: `${left} gap range(s) still pending at quiescence`,
      });
    if (this.model.violations.length > 0) this.log.push(...(await this.describeRows()));
  }

  /** The consumer rows, pending ranges and change of lanes as they stand: the failure's context. */
  private async describeRows(): Promise<string[]> {
    const sql = this.pools.admin;
    const s = (table: string) => sql(`${this.schema}.${table}`);
    const rows = await sql<Record<string, unknown>[]>`
      select name, instance_id, cursor::text, status, attempts, skip_event_id::text as skip
      from ${s('consumers')} order by name, instance_id`;
    const gaps = await sql<Record<string, unknown>[]>`select * from ${s('gaps')}`;
    const changes = await sql<Record<string, unknown>[]>`select * from ${s('lane_changes')}`;
    return [
      '-- at quiescence:',
      ...rows.map((r) => `row ${jsonLine(r)}`),
      ...gaps.map((g) => `gap ${jsonLine(g)}`),
      ...changes.map((c) => `lane change ${jsonLine(c)}`),
      `delivered ${jsonLine(Object.fromEntries(this.model.delivered))}`,
    ];
  }

  /** Changes of the laned consumer's lane count that switched over (audited 'relane-switched'). */
  async lanesSwitched(): Promise<number> {
    const [row] = await this.pools.admin<{ n: number }[]>`
      select count(*)::int as n from ${this.pools.admin(`${this.schema}.audit`)} where action = 'relane-switched'`;
    return row?.n ?? 0;
  }

  async pendingRanges(): Promise<number> {
    const [row] = await this.pools.admin<
      { n: number }[]
    >`select count(*)::int as n from ${this.pools.admin(`${this.schema}.gaps`)}`;
    return row?.n ?? 0;
  }

  async close(): Promise<void> {
    switchboard().mutant = null;
    switchboard().afterFetch = null;
    await this.resume().catch(() => undefined);
    for (const d of this.dispatchers) await d.stop();
    for (const [w, s] of this.sessions.entries()) {
      if (this.writers[w]?.inTx) await s`rollback`.catch(() => undefined);
      s.release();
    }
    if (this.foreignSession) {
      if (this.foreignHolding) await this.foreignSession`rollback`.catch(() => undefined);
      this.foreignSession.release();
    }
    await this.pools.admin.unsafe(`drop schema "${this.schema}" cascade`);
  }
}

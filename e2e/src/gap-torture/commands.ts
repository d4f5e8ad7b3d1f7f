// The command alphabet of docs/reliability.md §6.2, as fast-check commands over a TortureRun. Every
// command is one awaited SQL step (or a pass), so no step can block another; templates emit the
// E1/E2/cache/mid-turn-commit shapes that kill the mutants in a few dozen runs.
import fc from 'fast-check';
import { LANE_COUNTS, WRITERS, type TortureRun, type WriterState } from './harness.js';

/** The run carries both the facts (run.model) and the sessions' states: it is model and real. */
type Cmd = fc.AsyncCommand<TortureRun, TortureRun>;

interface Step {
  readonly name: string;
  check(run: Readonly<TortureRun>): boolean;
  act(run: TortureRun): Promise<void>;
}

const state = (run: Readonly<TortureRun>, w: number) => run.writers[w] as WriterState;

function command(step: Step): Cmd {
  return {
    check: (run) => step.check(run),
    run: async (_model, run) => {
      await step.act(run);
      run.log.push(step.name);
    },
    toString: () => step.name,
  };
}

const begin = (w: number): Step => ({
  name: `Begin(${w})`,
  check: (r) => !state(r, w).inTx,
  act: (r) => r.begin(w),
});
const forceXid = (w: number): Step => ({
  name: `ForceXid(${w})`,
  check: (r) => state(r, w).inTx && !state(r, w).hasXid,
  act: (r) => r.forceXid(w),
});
/** nextval() only. Sluice supports it only once the xid exists; the no-xid-first mutant allows it without. */
const reserve = (w: number): Step => ({
  name: `Reserve(${w})`,
  check: (r) => {
    const s = state(r, w);
    return s.inTx && s.reserved.length === 0 && (s.hasXid || r.mutant === 'no-xid-first');
  },
  act: (r) => r.reserve(w),
});
const insert = (w: number): Step => ({
  name: `Insert(${w})`,
  check: (r) => state(r, w).inTx && state(r, w).inserted.length < 4,
  act: (r) => r.insert(w),
});
const end = (w: number, commit: boolean): Step => ({
  name: `${commit ? 'Commit' : 'Rollback'}(${w})`,
  check: (r) => state(r, w).inTx,
  act: (r) => r.end(w, commit),
});
const foreign = (hold: boolean): Step => ({
  name: `Foreign(${hold ? 'hold' : 'release'})`,
  check: (r) => r.foreignHolding !== hold,
  act: (r) => r.foreign(hold),
});
const burnXids = (count: number): Step => ({
  name: `BurnXids(${count})`,
  check: () => true,
  act: (r) => r.burnXids(count),
});
const notParked = (r: Readonly<TortureRun>, i: number) => r.parked?.instance !== i;
const pass = (i: number): Step => ({
  name: `Pass(${i})`,
  check: (r) => notParked(r, i),
  act: (r) => r.pass(i),
});
/** A pass of instance i that stops inside its lock statements (before the row lock) until Resume. */
const passParked = (i: number): Step => ({
  name: `PassParked(${i})`,
  check: (r) => r.parked === null,
  act: (r) => r.passParked(i),
});
const resume: Step = { name: 'Resume', check: (r) => r.parked !== null, act: (r) => r.resume() };
/** A pass during whose turn writer w commits, right after the turn's fetch statement. */
const passWithMidTurnCommit = (i: number, w: number): Step => ({
  name: `Pass(${i}, commit ${w} mid-turn)`,
  check: (r) => notParked(r, i) && state(r, w).inTx && state(r, w).inserted.length > 0,
  act: (r) => r.pass(i, () => r.end(w, true)),
});

/**
 * A fixed sequence of steps; each runs only when its precondition holds at that point. It is
 * offered when `ready` holds (by default: when its first step may run).
 */
function template(name: string, steps: readonly Step[], ready?: (r: Readonly<TortureRun>) => boolean): Cmd {
  return {
    check: (r) => (ready ? ready(r) : (steps[0]?.check(r) ?? false)),
    run: async (_model, r) => {
      r.log.push(`${name} {`);
      for (const step of steps) {
        if (!step.check(r)) continue;
        await step.act(r);
        r.log.push(`  ${step.name}`);
      }
      r.log.push('}');
    },
    toString: () => `${name}[${steps.map((s) => s.name).join(', ')}]`,
  };
}

const writer = fc.integer({ min: 0, max: WRITERS - 1 });
const instance = fc.integer({ min: 0, max: 1 });
const distinct = (...xs: number[]) => new Set(xs).size === xs.length;

/**
 * E1: a reserver draws an id, others commit above it and passes run while it holds the id; it
 * inserts and commits later. With `xidFirst` it takes its xid before drawing (what the schema
 * guarantees). Without it the reserver draws with no xid (only the no-xid-first mutant lets it)
 * and gets one only later, above every fence those passes recorded; under the real schema that
 * reserve step is skipped and the reserver simply inserts late.
 */
const e1 = (xidFirst: boolean) =>
  fc
    .tuple(writer, writer, instance)
    .filter(([r, o]) => distinct(r, o))
    .map(([r, o, i]) =>
      template(xidFirst ? 'E1' : 'E1-no-xid', [
        begin(r),
        ...(xidFirst ? [forceXid(r)] : []),
        reserve(r),
        begin(o),
        insert(o),
        end(o, true),
        pass(i),
        pass(i),
        burnXids(2),
        insert(r),
        pass(i),
        end(r, true),
        pass(i),
      ]),
    );

/** E2: M takes an older xid, A an unrelated one, R an xid and an id; M commits above R; A ends. */
const e2 = fc
  .tuple(writer, writer, writer, instance)
  .filter(([m, a, r]) => distinct(m, a, r))
  .map(([m, a, r, i]) =>
    template('E2', [
      begin(m),
      forceXid(m),
      begin(a),
      forceXid(a),
      begin(r),
      forceXid(r),
      insert(r),
      insert(m),
      end(m, true),
      pass(i),
      pass(i),
      end(a, true),
      pass(i),
      pass(i),
      end(r, true),
      pass(i),
    ]),
  );

/** A session uses ids from its sequence cache in a later transaction (kills CACHE > 1). */
const cacheShape = fc
  .tuple(writer, writer, instance)
  .filter(([a, b]) => distinct(a, b))
  .map(([a, b, i]) =>
    template('Cache', [
      begin(a),
      insert(a),
      end(a, true),
      begin(b),
      insert(b),
      end(b, true),
      pass(i),
      pass(i),
      begin(a),
      insert(a),
      burnXids(2),
      pass(i),
      pass(i),
      end(a, true),
      pass(i),
    ]),
  );

/** A commit lands between a turn's fetch and the rest of the turn (kills a late snapshot). */
const midTurn = fc
  .tuple(writer, writer, instance)
  .filter(([a, b]) => distinct(a, b))
  .map(([a, b, i]) =>
    template('MidTurn', [
      begin(a),
      insert(a),
      begin(b),
      insert(b),
      end(b, true),
      pass(i),
      pass(i),
      passWithMidTurnCommit(i, a),
      pass(i),
      pass(i),
    ]),
  );

/**
 * Lock takeover (EvalPlanQual): instance b's lock statement has taken its snapshot when a writer
 * younger than it opens and holds an id, a later id commits, and instance a takes a whole turn (it
 * records the hole) and commits; then b's lock proceeds on the row version a wrote and b's turn
 * fences the hole. Its fence must be above the writer's xid: the horizon then moves on while the
 * writer is still open, and the hole must not burn before the writer commits.
 */
const takeover = fc
  .tuple(writer, writer, instance)
  .filter(([w, x]) => distinct(w, x))
  .map(([w, x, b]) =>
    template(
      'Takeover',
      [
        begin(x),
        insert(x),
        end(x, true),
        passParked(b),
        begin(w),
        forceXid(w),
        insert(w),
        begin(x),
        insert(x),
        end(x, true),
        pass(1 - b),
        resume,
        burnXids(2),
        pass(1 - b),
        pass(b),
        end(w, true),
        pass(1 - b),
        pass(b),
      ],
      (r) => r.parked === null && !state(r, w).inTx && !state(r, x).inTx,
    ),
  );

/** An operator asks for the laned consumer to run as `lanes` lanes (docs/design.md §11.3). */
const relane = (lanes: number): Step => ({
  name: `Relane(${lanes})`,
  check: () => true,
  act: (r) => r.relane(lanes),
});

/**
 * A change of lanes while a writer holds an id below the barrier and another commits above it:
 * the old lanes record the hole, the change switches over, and the old lane that owns the held id
 * must deliver it (not give it up) once the writer commits, while the new lanes go on.
 */
const relaneShape = fc
  .tuple(writer, writer, instance, fc.constantFrom(...LANE_COUNTS))
  .filter(([w, x]) => distinct(w, x))
  .map(([w, x, i, lanes]) =>
    template('Relane', [
      begin(w),
      forceXid(w),
      insert(w),
      begin(x),
      insert(x),
      end(x, true),
      pass(i),
      relane(lanes),
      pass(i),
      pass(1 - i),
      begin(x),
      insert(x),
      end(x, true),
      pass(i),
      burnXids(2),
      pass(1 - i),
      end(w, true),
      pass(i),
      pass(1 - i),
    ]),
  );

export const commandArbitraries: fc.Arbitrary<Cmd>[] = [
  fc.constantFrom(...LANE_COUNTS).map((n) => command(relane(n))),
  relaneShape,
  writer.map((w) => command(begin(w))),
  writer.map((w) => command(forceXid(w))),
  writer.map((w) => command(reserve(w))),
  writer.map((w) => command(insert(w))),
  writer.map((w) => command(insert(w))),
  fc.tuple(writer, fc.boolean()).map(([w, c]) => command(end(w, c))),
  writer.map((w) => command(end(w, true))),
  fc.boolean().map((h) => command(foreign(h))),
  fc.integer({ min: 1, max: 3 }).map((k) => command(burnXids(k))),
  instance.map((i) => command(pass(i))),
  instance.map((i) => command(pass(i))),
  fc.tuple(instance, writer).map(([i, w]) => command(passWithMidTurnCommit(i, w))),
  instance.map((i) => command(passParked(i))),
  fc.constant(command(resume)),
  e1(true),
  e1(false),
  e2,
  cacheShape,
  midTurn,
  takeover,
];

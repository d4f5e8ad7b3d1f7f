// The facts-only model of docs/reliability.md §6.3: not a second dispatcher, just what has happened to
// each id and what each consumer has received, and the invariants those facts imply.

export type IdFate = 'open' | 'committed' | 'dead';

export interface Violation {
  readonly invariant: 'I1' | 'I2' | 'I3' | 'I4' | 'I7' | 'I8';
  readonly message: string;
}

export class TortureModel {
  /**
   * Every id drawn from the sequence, with its fate, its owner while its transaction is open, and
   * the writer that drew it (its event's stream, which picks its lane).
   */
  readonly ids = new Map<bigint, { fate: IdFate; owner: number | null; writer: number }>();
  readonly delivered = new Map<string, bigint[]>();
  readonly cursors = new Map<string, bigint>();
  /** Session-cached ids (CACHE > 1): drawn by a session, usable by its later transactions. */
  readonly cachedBy = new Map<bigint, number>();
  readonly violations: Violation[] = [];

  readonly consumers: readonly { name: string; strict: boolean }[];

  constructor(consumers: readonly { name: string; strict: boolean }[]) {
    this.consumers = consumers;
    for (const c of consumers) {
      this.delivered.set(c.name, []);
      this.cursors.set(c.name, 0n);
    }
  }

  drawn(id: bigint, owner: number): void {
    this.ids.set(id, { fate: 'open', owner, writer: owner });
    this.cachedBy.delete(id);
  }

  ended(owner: number, committedIds: readonly bigint[], commit: boolean): void {
    for (const [id, fact] of this.ids) {
      if (fact.owner !== owner || fact.fate !== 'open') continue;
      fact.fate = commit && committedIds.includes(id) ? 'committed' : 'dead';
      fact.owner = null;
    }
  }

  private violate(invariant: Violation['invariant'], message: string): void {
    this.violations.push({ invariant, message });
  }

  /** A delivery the handler saw (checked at once: I7 phantom, I3 duplicate, I2 strict order). */
  deliver(consumer: string, id: bigint): void {
    const list = this.delivered.get(consumer) ?? [];
    const fact = this.ids.get(id);
    if (fact?.fate !== 'committed') {
      this.violate('I7', `${consumer} received ${id}, which is ${fact ? fact.fate : 'unknown'} (phantom)`);
    }
    if (list.includes(id)) this.violate('I3', `${consumer} received ${id} twice without a fault`);
    const strict = this.consumers.find((c) => c.name === consumer)?.strict ?? false;
    const last = list[list.length - 1];
    if (strict && last !== undefined && id < last)
      this.violate('I2', `strict ${consumer} received ${id} after ${last}`);
    list.push(id);
    this.delivered.set(consumer, list);
  }

  /**
   * After a pass: the cursor never moves back (I4), and every id at or below it that is neither
   * delivered nor pending has been given up — which is only right if it can never commit (I8):
   * its transaction ended without committing it (or it was never inserted), and no session holds
   * it in a sequence cache.
   */
  observe(consumer: string, cursor: bigint, pending: ReadonlySet<bigint>): void {
    const before = this.cursors.get(consumer) ?? 0n;
    if (cursor < before) this.violate('I4', `${consumer}'s cursor moved back from ${before} to ${cursor}`);
    this.cursors.set(consumer, cursor);
    const delivered = new Set(this.delivered.get(consumer));
    for (const [id, fact] of this.ids) {
      if (id > cursor || delivered.has(id) || pending.has(id)) continue;
      if (fact.fate === 'committed')
        this.violate('I8', `${consumer} gave up ${id}, which is committed and was never delivered`);
      else if (fact.fate === 'open')
        this.violate(
          'I8',
          `${consumer} gave up ${id} while its transaction (session ${fact.owner}) is still open`,
        );
    }
    for (const [id, session] of this.cachedBy) {
      if (id <= cursor && !delivered.has(id) && !pending.has(id)) {
        this.violate(
          'I8',
          `${consumer} gave up ${id}, which session ${session} still holds in its sequence cache`,
        );
      }
    }
  }

  /**
   * After a pass, for a consumer run as lanes (docs/design.md §11), whose rows may belong to two
   * lane counts while its count changes: each row's cursor never moves back (I4), and an id is given
   * up (I8 applies) only when every row of the lane that owns it has passed it without delivering
   * it or keeping it pending. `laneOf(writer, count)`: the lane of the writer's stream among `count`.
   */
  observeLanes(
    consumer: string,
    rows: readonly {
      instanceId: string;
      index: number;
      count: number;
      cursor: bigint;
      pending: ReadonlySet<bigint>;
    }[],
    laneOf: (writer: number, count: number) => number,
  ): void {
    for (const row of rows) {
      const key = `${consumer}@${row.instanceId}`;
      const before = this.cursors.get(key) ?? 0n;
      if (row.cursor < before)
        this.violate('I4', `${key}'s cursor moved back from ${before} to ${row.cursor}`);
      this.cursors.set(key, row.cursor);
    }
    if (rows.length === 0) return;
    const delivered = new Set(this.delivered.get(consumer));
    for (const [id, fact] of this.ids) {
      if (delivered.has(id)) continue;
      const owners = rows.filter((r) => laneOf(fact.writer, r.count) === r.index);
      if (owners.length === 0 || owners.some((r) => id > r.cursor || r.pending.has(id))) continue;
      if (fact.fate === 'committed')
        this.violate('I8', `${consumer} gave up ${id}, which is committed and was never delivered`);
      else if (fact.fate === 'open')
        this.violate(
          'I8',
          `${consumer} gave up ${id} while its transaction (session ${fact.owner}) is still open`,
        );
    }
  }

  /** At quiescence (every transaction ended, horizon free): every committed id delivered exactly once (I1). */
  quiescent(): void {
    for (const c of this.consumers) {
      const delivered = new Set(this.delivered.get(c.name));
      for (const [id, fact] of this.ids) {
        if (fact.fate === 'committed' && !delivered.has(id))
          this.violate('I1', `${c.name} never received committed ${id}`);
      }
    }
  }
}

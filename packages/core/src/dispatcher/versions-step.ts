// Which declared versions of a consumer this process runs, and the takeovers it drives
// (docs/design.md §12): a version runs while it is live, rebuilding or taking over; a process that
// runs a rebuild takes it over by itself once it is within its declared distance of the head, and
// any process that declares the consumer ends a takeover once the rebuild has reached the barrier.
import { messageOf } from '../errors.js';
import type { Logger } from '../logger.js';
import type { ResolvedOptions, ResolvedConsumer } from '../options.js';
import type { Precheck } from '../queries/consumers.js';
import {
  beginTakeover,
  completeTakeover,
  RUNNING_STATES,
  selectVersions,
  type VersionRow,
} from '../queries/versions.js';
import type { Tables } from '../schema/tables.js';
import type { DispatcherMetrics } from '../telemetry/metrics.js';

/** The actor the dispatcher's own takeovers are audited as. */
export const DISPATCHER_ACTOR = 'sluice-dispatcher';

export class VersionKeeper {
  readonly #options: ResolvedOptions;
  readonly #tables: Tables;
  readonly #logger: Logger;
  readonly #metrics: DispatcherMetrics;
  /** The consumers this process declares with a version, by name. */
  readonly #declared: ReadonlyMap<string, readonly ResolvedConsumer[]>;
  #versions = new Map<string, readonly VersionRow[]>();

  constructor(options: ResolvedOptions, tables: Tables, logger: Logger, metrics: DispatcherMetrics) {
    this.#options = options;
    this.#tables = tables;
    this.#logger = logger;
    this.#metrics = metrics;
    const declared = new Map<string, ResolvedConsumer[]>();
    for (const c of options.consumers) {
      if (c.version === null) continue;
      const list = declared.get(c.baseName);
      if (list) list.push(c);
      else declared.set(c.baseName, [c]);
    }
    this.#declared = declared;
  }

  /** Whether this process declares any version at all (nothing to do otherwise). */
  get active(): boolean {
    return this.#declared.size > 0;
  }

  /** The versions as registration (or the last refresh) left them. */
  set(versions: ReadonlyMap<string, readonly VersionRow[]>): void {
    this.#versions = new Map(versions);
  }

  /**
   * Whether the process turns `consumer`'s rows: an unversioned consumer always; a version while
   * it is live, rebuilding or taking over (a version with side effects only while live: its rows
   * are the live version's).
   */
  runs(consumer: ResolvedConsumer): boolean {
    if (consumer.version === null) return true;
    const row = this.rowOf(consumer);
    // Rows named otherwise than this process names them (the first process to declare the
    // version decided, e.g. with another sideEffects) are not this declaration's: not run.
    return row !== undefined && row.rowName === consumer.name && RUNNING_STATES.has(row.state);
  }

  /** The recorded version `consumer` declares, if any. */
  rowOf(consumer: ResolvedConsumer): VersionRow | undefined {
    if (consumer.version === null) return undefined;
    return this.#versions.get(consumer.baseName)?.find((v) => v.version === consumer.version);
  }

  /** Reads the versions again (something changed in the database since the last pre-check). */
  async refresh(): Promise<void> {
    if (!this.active) return;
    const rows = await selectVersions(this.#options.sql, this.#tables, [...this.#declared.keys()]);
    const versions = new Map<string, VersionRow[]>();
    for (const row of rows) {
      const list = versions.get(row.consumerName);
      if (list) list.push(row);
      else versions.set(row.consumerName, [row]);
    }
    this.#versions = versions;
  }

  /**
   * The takeovers this process drives, after a full pre-check: for each version on its way that it
   * declares, start the takeover once it is within its distance of the head (a version with side
   * effects: at once), or end one whose rebuild has caught up. Refreshes the versions first and
   * after any change. Failures are logged; the next pass tries again.
   */
  async step(precheck: Precheck | undefined): Promise<void> {
    if (!this.active) return;
    try {
      await this.refresh();
    } catch (error) {
      this.#logger.warn(
        { error: messageOf(error) },
        'the consumer versions could not be read; trying again next pass',
      );
      return;
    }
    let changed = false;
    for (const [name, versions] of this.#versions) {
      const next = versions.find((v) => ['rebuilding', 'waiting', 'taking-over'].includes(v.state));
      const declared = this.#declared.get(name) ?? [];
      this.#reportLag(name, next, precheck);
      // A takeover is ended by any process that declares the consumer (it needs no code of the new
      // version: only its rows), so a rollback of the deployment to the old version alone does not
      // leave the live version stopped for ever. A takeover is started only by one that runs it.
      if (!next || (next.state !== 'taking-over' && !declared.some((c) => c.version === next.version)))
        continue;
      try {
        if (next.state === 'taking-over') {
          changed =
            (await completeTakeover(
              this.#options.sql,
              this.#tables,
              name,
              DISPATCHER_ACTOR,
              this.#options.statementTimeoutMs,
            )) || changed;
          continue;
        }
        if (next.takeoverWithin === null) continue;
        const lag = next.sideEffects ? 0n : this.#lagOf(next, precheck);
        if (lag === null || lag > next.takeoverWithin) continue;
        const change = await beginTakeover(this.#options.sql, this.#tables, this.#options.schema, name, {
          actor: DISPATCHER_ACTOR,
          version: next.version,
          within: next.takeoverWithin,
          lockTimeoutMs: this.#options.statementTimeoutMs,
        });
        this.#logger.info(
          { consumer: name, version: change.version, state: change.state, barrier: change.barrier },
          change.state === 'live' ? 'the new version took over' : 'the new version is taking over',
        );
        changed = true;
      } catch (error) {
        this.#logger.warn(
          { consumer: name, version: next.version, error: messageOf(error) },
          'the takeover of the new version did not go through; trying again next pass',
        );
      }
    }
    if (changed) await this.refresh().catch(() => undefined);
  }

  /** A rebuild's lag behind the head, from the pre-check's rows (null: not known from it). */
  #lagOf(next: VersionRow, precheck: Precheck | undefined): bigint | null {
    if (!precheck) return null;
    let lowest: bigint | null = null;
    let quietRows = false;
    for (const row of precheck.rows.values()) {
      if (row.name !== next.rowName) continue;
      const cursor = BigInt(row.cursor);
      if (lowest === null || cursor < lowest) lowest = cursor;
    }
    // A rebuild whose rows are all quiet (at the head) is not among the rows: lag 0.
    for (const key of precheck.quiet) {
      if (key === next.rowName || key.startsWith(`${next.rowName}\u0000`)) quietRows = true;
    }
    if (lowest === null) return quietRows ? 0n : null;
    const head = BigInt(precheck.head);
    return head > lowest ? head - lowest : 0n;
  }

  #reportLag(name: string, next: VersionRow | undefined, precheck: Precheck | undefined): void {
    if (!next || next.sideEffects) {
      this.#metrics.setRebuildLag(name, null);
      return;
    }
    const lag = this.#lagOf(next, precheck);
    if (lag !== null) this.#metrics.setRebuildLag(name, { version: next.version, lagEvents: lag });
  }
}

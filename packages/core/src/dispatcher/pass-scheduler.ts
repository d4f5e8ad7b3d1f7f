// When passes run (docs/design.md §4.1): wake-ups from the poll timer, NOTIFY and this process's
// commits coalesce, so at most one pass runs and one more is queued; the queued one remembers the
// strongest reason it was asked for.
import { context, ROOT_CONTEXT } from '@opentelemetry/api';
import { messageOf } from '../errors.js';
import type { Logger } from '../logger.js';

/** Why a pass runs: undefined for a poll tick, else the kind of commit that was announced. */
export type PassWake = 'notify' | 'local' | undefined;

export class PassScheduler {
  readonly #run: (wake: PassWake) => Promise<unknown>;
  readonly #accepting: () => boolean;
  readonly #logger: Logger;
  readonly #inFlight = new Set<Promise<unknown>>();
  #running = false;
  #requested = false;
  /** A pending request came from an announced commit (NOTIFY or this process). */
  #woken = false;
  /** A pending request came from a commit in this process. */
  #local = false;

  /**
   * @param run one pass
   * @param accepting whether requests are served now (started and not stopping)
   */
  constructor(run: (wake: PassWake) => Promise<unknown>, accepting: () => boolean, logger: Logger) {
    this.#run = run;
    this.#accepting = accepting;
    this.#logger = logger;
  }

  /**
   * Asks for a pass. `woken`: a commit was announced (NOTIFY or a local append), so the pass need
   * not first ask whether anything changed since the last pre-check. `local`: by transaction() in
   * this process, on this pool (a NOTIFY may come from anyone who can connect, and may be late).
   */
  request(woken: boolean, local = false): void {
    if (!this.#accepting()) return;
    this.#woken ||= woken;
    this.#local ||= local;
    if (this.#running) {
      this.#requested = true;
      return;
    }
    this.#running = true;
    // A request's commit pokes this synchronously, inside the request's async context: started
    // there, the pass (its turn spans, and whatever handlers read from the active context) would
    // belong to that request. Passes serve every appender; the appenders' traces are links on the
    // handler spans (traceparent in the event metadata).
    void this.track(context.with(ROOT_CONTEXT, () => this.#runPasses()));
  }

  /** Counts `promise` as a pass in flight until it settles (see {@link drain}). */
  track<T>(promise: Promise<T>): Promise<T> {
    this.#inFlight.add(promise);
    const settled = () => {
      this.#inFlight.delete(promise);
    };
    void promise.then(settled, settled);
    return promise;
  }

  /** Settles once no pass is in flight. */
  async drain(): Promise<void> {
    while (this.#inFlight.size > 0) await Promise.allSettled([...this.#inFlight]);
  }

  /** Another pass was asked for while this one ran (a method: the request comes in meanwhile). */
  #askedAgain(): boolean {
    return this.#requested && this.#accepting();
  }

  /** Runs passes for as long as requests come in while one runs, one at a time. */
  async #runPasses(): Promise<void> {
    try {
      do {
        this.#requested = false;
        const wake: PassWake = this.#woken ? (this.#local ? 'local' : 'notify') : undefined;
        this.#woken = false;
        this.#local = false;
        await this.#run(wake);
      } while (this.#askedAgain());
    } catch (error) {
      this.#logger.error({ error: messageOf(error) }, 'dispatcher pass failed');
    } finally {
      this.#running = false;
    }
  }
}

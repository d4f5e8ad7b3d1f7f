// Whether notifications sent through the pool reach the LISTEN connection (docs/design.md §4.8).
// Behind a transaction pooler (PgBouncer's pool_mode=transaction) LISTEN succeeds, but the server
// connection it ran on goes back to the pool, and notifications never arrive.
import { randomBytes } from 'node:crypto';
import { settleWithin, TIMED_OUT } from '../time-limit.js';

/** Payloads of the listeners' own probes: never a wake-up, whoever sent them. */
export const PROBE_PREFIX = 'sluice-probe:';

/**
 * LISTEN is taken as working once PROBES_NEEDED probes sent through the pool have each been heard
 * within PROBE_WAIT_MS, and as deaf at the PROBE_MISSES_ALLOWED + 1st miss. Behind a transaction
 * pooler a probe is still heard now and then (when it reaches the server connection the LISTEN ran
 * on while that connection is serving the listener), so one heard probe proves nothing; on a
 * connection of its own every probe arrives, and one slow one is forgiven.
 */
const PROBE_WAIT_MS = 2_000;
const PROBES_NEEDED = 5;
const PROBE_MISSES_ALLOWED = 1;

/**
 * A listener found deaf probes again after REPROBE_INITIAL_MS, doubling to REPROBE_MAX_MS: two
 * slow probes on a loaded server must not turn wake-ups off for the life of the process, and a
 * listener that really is behind a transaction pooler costs one short session every few minutes.
 */
export const REPROBE_INITIAL_MS = 30_000;
export const REPROBE_MAX_MS = 300_000;

/** heard: LISTEN works; deaf: the probes did not arrive; unsent: a probe could not be sent. */
export type Hearing =
  | { readonly outcome: 'heard' }
  | { readonly outcome: 'deaf' }
  | { readonly outcome: 'unsent'; readonly error: unknown };

/** The probe a listener is waiting to hear, fed by its connection's notifications. */
export class ProbeEar {
  #waiting: { readonly payload: string; readonly heard: () => void } | undefined;

  /** A probe payload arrived on the LISTEN connection. */
  arrived(payload: string): void {
    if (this.#waiting?.payload === payload) this.#waiting.heard();
  }

  /** Sends probes with `probe` (through the pool) until LISTEN is proven to work or to be deaf. */
  async listen(
    probe: (payload: string) => Promise<unknown>,
    stopped: () => boolean,
    waitMs = PROBE_WAIT_MS,
  ): Promise<Hearing> {
    let heardCount = 0;
    let missed = 0;
    while (heardCount < PROBES_NEEDED && !stopped()) {
      const payload = `${PROBE_PREFIX}${randomBytes(9).toString('base64url')}`;
      let heard: () => void = () => undefined;
      const arrived = new Promise<void>((resolve) => {
        heard = resolve;
      });
      this.#waiting = { payload, heard };
      try {
        await probe(payload);
        if ((await settleWithin(arrived, waitMs)) !== TIMED_OUT) heardCount += 1;
        else if (++missed > PROBE_MISSES_ALLOWED) return { outcome: 'deaf' };
      } catch (error) {
        return { outcome: 'unsent', error };
      } finally {
        // Only its own: a later listen() may wait for a probe of its own by now.
        const waiting = this.#waiting as { readonly payload: string } | undefined; // set by another listen() meanwhile, perhaps
        if (waiting?.payload === payload) this.#waiting = undefined;
      }
    }
    return { outcome: 'heard' };
  }
}

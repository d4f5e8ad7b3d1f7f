/**
 * Counts deliveries of `expected` events (numbered 0..expected-1 by their `seq`) to each consumer,
 * to report lost (never delivered) and duplicated (delivered more than once) events per run.
 */
export class DeliveryTracker {
  readonly #counts: Uint8Array[];
  readonly #expected: number;
  #distinct = 0;
  #delivered = 0;
  #outOfRange = 0;
  #waiters: { target: number; resolve: () => void }[] = [];
  /** performance.now() of the first and the last delivery (0: none yet). */
  firstDeliveryAt = 0;
  lastDeliveryAt = 0;

  constructor(consumers: number, expected: number) {
    this.#expected = expected;
    this.#counts = Array.from({ length: consumers }, () => new Uint8Array(expected));
  }

  record(consumer: number, seq: number): void {
    const counts = this.#counts[consumer];
    if (!counts || !Number.isInteger(seq) || seq < 0 || seq >= this.#expected) {
      this.#outOfRange++;
      return;
    }
    this.#delivered++;
    this.lastDeliveryAt = performance.now();
    if (this.firstDeliveryAt === 0) this.firstDeliveryAt = this.lastDeliveryAt;
    const seen = counts[seq] as number;
    if (seen < 255) counts[seq] = seen + 1;
    if (seen === 0) {
      this.#distinct++;
      if (this.#waiters.length > 0) this.#wake();
    }
  }

  /** Distinct deliveries (consumer, event) so far. */
  get distinct(): number {
    return this.#distinct;
  }

  get delivered(): number {
    return this.#delivered;
  }

  /** Resolves true once `target` distinct deliveries happened (default: all), false after timeoutMs. */
  whenDistinct(target: number, timeoutMs: number): Promise<boolean> {
    if (this.#distinct >= target) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#waiters = this.#waiters.filter((w) => w !== waiter);
        resolve(false);
      }, timeoutMs);
      const waiter = {
        target,
        resolve: () => {
          clearTimeout(timer);
          resolve(true);
        },
      };
      this.#waiters.push(waiter);
    });
  }

  whenComplete(timeoutMs: number): Promise<boolean> {
    return this.whenDistinct(this.#counts.length * this.#expected, timeoutMs);
  }

  /** Events of seq < upTo that some consumer never received. */
  lost(upTo = this.#expected): number {
    let lost = 0;
    for (const counts of this.#counts) for (let i = 0; i < upTo; i++) if (counts[i] === 0) lost++;
    return lost;
  }

  /** Deliveries beyond the first of each (consumer, event), plus deliveries of unknown events. */
  duplicated(): number {
    return this.#delivered - this.#distinct + this.#outOfRange;
  }

  #wake(): void {
    const due = this.#waiters.filter((w) => this.#distinct >= w.target);
    if (due.length === 0) return;
    this.#waiters = this.#waiters.filter((w) => this.#distinct < w.target);
    for (const w of due) w.resolve();
  }
}

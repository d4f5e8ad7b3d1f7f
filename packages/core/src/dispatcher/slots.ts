/**
 * Concurrency slots for turns (docs/design.md §4.2): at most `size` turns run at once, each holding one
 * pool connection. A consumer whose turn is running or queued is not started twice: a second
 * caller gets the same promise.
 */
export class TurnSlots<T> {
  readonly #size: number;
  #running = 0;
  readonly #queue: (() => void)[] = [];
  readonly #inFlight = new Map<string, Promise<T>>();
  #maxRunning = 0;

  constructor(size: number) {
    this.#size = size;
  }

  /** Runs `turn` for `key` in a slot, or joins the run already running or queued for `key`. */
  run(key: string, turn: () => Promise<T>): Promise<T> {
    const existing = this.#inFlight.get(key);
    if (existing) return existing;
    const promise = this.#acquire()
      .then(turn)
      .finally(() => {
        this.#inFlight.delete(key);
        this.#release();
      });
    this.#inFlight.set(key, promise);
    return promise;
  }

  /** A run for `key` is running or queued. */
  has(key: string): boolean {
    return this.#inFlight.has(key);
  }

  /** Settles once nothing is running or queued. */
  async idle(): Promise<void> {
    while (this.#inFlight.size > 0) await Promise.allSettled([...this.#inFlight.values()]);
  }

  get size(): number {
    return this.#size;
  }

  get running(): number {
    return this.#running;
  }

  /** The most turns that ever ran at once (for tests and telemetry). */
  get maxRunning(): number {
    return this.#maxRunning;
  }

  #acquire(): Promise<void> {
    if (this.#running < this.#size) {
      this.#running += 1;
      this.#maxRunning = Math.max(this.#maxRunning, this.#running);
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      this.#queue.push(() => {
        this.#running += 1;
        this.#maxRunning = Math.max(this.#maxRunning, this.#running);
        resolve();
      });
    });
  }

  #release(): void {
    this.#running -= 1;
    this.#queue.shift()?.();
  }
}

// What a running turn holds: one of the dispatcher's `concurrency` slots, and a pool of one
// connection of its own.
import type { OwnConnections } from '../connections/own-connections.js';

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

  /** Runs waiting for a slot. */
  get waiting(): number {
    return this.#queue.length;
  }

  /**
   * From a running run: hands its slot to the first run waiting, and waits for one again behind the
   * others (round robin). Resolves at once when none waits.
   */
  async yieldSlot(): Promise<void> {
    if (this.#queue.length === 0) return;
    this.#release();
    await this.#acquire();
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

/**
 * The connections turns run on: one pool of Sluice's own per turn running at once, each of one
 * connection, opened as they are first needed (at most the dispatcher's concurrency). A turn's
 * transaction pipelines its BEGIN with its first statements on a reserved connection
 * (pipelined-begin.ts), which needs to know when that connection closes; postgres.js only says
 * that one of a pool's connections closed, so each turn has a pool of its own, whose closes are
 * its connection's.
 */
export class TurnConnections {
  readonly #open: () => OwnConnections;
  readonly #free: OwnConnections[] = [];
  readonly #all: OwnConnections[] = [];

  constructor(open: () => OwnConnections) {
    this.#open = open;
  }

  /** A pool no running turn uses. */
  acquire(): OwnConnections {
    const free = this.#free.pop();
    if (free) return free;
    const opened = this.#open();
    this.#all.push(opened);
    return opened;
  }

  release(connections: OwnConnections): void {
    this.#free.push(connections);
  }

  /** How many times their pools were replaced after a connection closed, in all. */
  get replacements(): number {
    return this.#all.reduce((sum, c) => sum + c.replacements, 0);
  }

  async end(): Promise<void> {
    await Promise.all(this.#all.map((c) => c.end()));
  }
}

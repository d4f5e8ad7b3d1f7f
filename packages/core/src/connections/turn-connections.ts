import type { OwnConnections } from './own-connections.js';

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

import { constants, PerformanceObserver, type PerformanceEntry } from 'node:perf_hooks';
import { GCProfiler, getHeapSpaceStatistics, type HeapSpaceStatistics } from 'node:v8';

/**
 * Node's GC pauses between `from` and `to` (performance.now() times). In the latency scenario the
 * appender and the consumer share the process: a pause holds up every event in flight, one cause of
 * an append→handler tail (a stall of the server is another).
 */
export class GcPauses {
  from = Number.POSITIVE_INFINITY;
  to = Number.POSITIVE_INFINITY;
  longest = 0;
  #total = 0;
  readonly #observer = new PerformanceObserver((list) => {
    this.#take(list.getEntries());
  });

  constructor() {
    this.#observer.observe({ entryTypes: ['gc'] });
  }

  /** Pause time in all, ms. */
  get totalMs(): number {
    return this.#total;
  }

  msPerSecond(): number {
    const seconds = (this.to - this.from) / 1000;
    return seconds > 0 ? this.#total / seconds : 0;
  }

  stop(): void {
    this.#take(this.#observer.takeRecords());
    this.#observer.disconnect();
  }

  #take(entries: readonly PerformanceEntry[]): void {
    for (const entry of entries) {
      if (entry.startTime < this.from || entry.startTime > this.to) continue;
      this.#total += entry.duration;
      this.longest = Math.max(this.longest, entry.duration);
    }
  }
}

/** Full collections: the ones V8's memory reducer runs a few seconds after a process goes quiet. */
const FULL_GC_KINDS: ReadonlySet<number> = new Set([
  constants.NODE_PERFORMANCE_GC_MAJOR,
  constants.NODE_PERFORMANCE_GC_INCREMENTAL,
]);

/**
 * Full GCs from the moment it is made: {@link settled} waits until at least one has run and none has
 * run for a while since. V8's memory reducer collects the garbage of a busy phase in full GCs once
 * allocation slows down: in scratch runs of the idle scenario they came 15 to 23 s after the setup
 * (its timer runs 8 s at a time). Without this wait they land in the measured window, a one-off
 * cost of the setup, not of idling.
 */
export class FullGcWatch {
  readonly #started = performance.now();
  #lastFull: number | undefined;
  readonly #observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      const kind = (entry as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind;
      if (kind !== undefined && FULL_GC_KINDS.has(kind)) this.#lastFull = entry.startTime + entry.duration;
    }
  });

  constructor() {
    this.#observer.observe({ entryTypes: ['gc'] });
  }

  /**
   * Resolves once a full GC has run since the watch began and none for `quietMs` since, or
   * `maxMs` after the watch began (`quiet: false`); `waitedMs` counts from the call. `quietMs` 0:
   * at once.
   */
  async settled(quietMs: number, maxMs: number): Promise<{ waitedMs: number; quiet: boolean }> {
    const called = performance.now();
    try {
      if (quietMs <= 0) return { waitedMs: 0, quiet: true };
      const deadline = this.#started + maxMs;
      for (;;) {
        const now = performance.now();
        const quietUntil = this.#lastFull === undefined ? Number.POSITIVE_INFINITY : this.#lastFull + quietMs;
        if (now >= quietUntil) return { waitedMs: now - called, quiet: true };
        if (now >= deadline) return { waitedMs: now - called, quiet: false };
        // A full GC that starts meanwhile is seen when this wakes up: 1 s steps at most.
        await new Promise((resolve) =>
          setTimeout(resolve, Math.min(quietUntil, deadline, now + 1_000) - now),
        );
      }
    } finally {
      this.#observer.disconnect();
    }
  }
}

const YOUNG_SPACES: ReadonlySet<string> = new Set(['new_space', 'new_large_object_space']);
const OLD_SPACES: ReadonlySet<string> = new Set(['old_space', 'large_object_space']);

function usedIn(spaces: readonly HeapSpaceStatistics[], names: ReadonlySet<string>): number {
  let used = 0;
  for (const space of spaces) if (names.has(space.spaceName)) used += space.spaceUsedSize;
  return used;
}

function youngUsedNow(): number {
  let used = 0;
  for (const space of getHeapSpaceStatistics())
    if (YOUNG_SPACES.has(space.space_name)) used += space.space_used_size;
  return used;
}

/**
 * What the process allocated in V8's young generation between start() and stop(), and the share of
 * the young generation that a scavenge found alive (copied, or promoted to the old generation): a
 * scavenge's pause grows with that share, not with what died. Taken from V8's heap statistics
 * before and after each GC (v8.GCProfiler). Promotion is read as the old generation's growth during
 * the scavenge, so it is approximate when the concurrent sweeper frees old memory at the same time.
 */
export class YoungGeneration {
  #profiler: GCProfiler | undefined;
  #youngAtStart = 0;

  start(): void {
    this.#youngAtStart = youngUsedNow();
    this.#profiler = new GCProfiler();
    this.#profiler.start();
  }

  /**
   * Bytes allocated in the young generation; bytes of young generation that scavenges went through,
   * and those they found alive (with their percentage). All zero when it was not started, or is
   * stopped a second time.
   */
  stop(): { allocatedBytes: number; scavengedBytes: number; survivedBytes: number; survivedPercent: number } {
    const profiler = this.#profiler;
    if (profiler === undefined)
      return { allocatedBytes: 0, scavengedBytes: 0, survivedBytes: 0, survivedPercent: 0 };
    this.#profiler = undefined;
    const result = profiler.stop();
    let allocated = 0;
    let scavenged = 0;
    let survived = 0;
    let youngAfter = this.#youngAtStart;
    for (const gc of result.statistics) {
      const before = gc.beforeGC.heapSpaceStatistics;
      const after = gc.afterGC.heapSpaceStatistics;
      const youngBefore = usedIn(before, YOUNG_SPACES);
      allocated += Math.max(0, youngBefore - youngAfter);
      youngAfter = usedIn(after, YOUNG_SPACES);
      if (gc.gcType === 'Scavenge') {
        scavenged += youngBefore;
        survived += youngAfter + Math.max(0, usedIn(after, OLD_SPACES) - usedIn(before, OLD_SPACES));
      }
    }
    allocated += Math.max(0, youngUsedNow() - youngAfter);
    return {
      allocatedBytes: allocated,
      scavengedBytes: scavenged,
      survivedBytes: survived,
      survivedPercent: scavenged > 0 ? (100 * survived) / scavenged : 0,
    };
  }
}

/**
 * The order of handler calls within each stream, as a system running several calls at once hands
 * them out. Events of a stream are numbered by `seq` in the order they were appended. Three counts:
 *
 * - inversions: calls that started after a later event of their stream had started;
 * - inversions at finish: calls that returned after a later event of their stream had returned
 *   (what a handler whose effect lands at its end, after its await, would apply out of order);
 * - overlaps: calls that started while another event of their stream was still in its handler.
 *
 * A system that keeps order per stream (one lane delivers its events one at a time, in id order)
 * has none; a redelivery would count as an inversion.
 */
/** One handler call, from start() to finish(). */
export interface Call {
  readonly stream: string;
  readonly seq: number;
  readonly startedAt: number;
}

export class StreamOrder {
  readonly #latestStarted = new Map<string, number>();
  readonly #latestFinished = new Map<string, number>();
  readonly #running = new Map<string, number>();
  #inversions = 0;
  #finishInversions = 0;
  #overlaps = 0;
  #calls = 0;
  #callMs = 0;
  /** performance.now() when the first call started. */
  firstStartedAt: number | undefined;

  /** A handler call of event `seq` of `stream` starts; returns what finish() takes. */
  start(stream: string, seq: number): Call {
    const startedAt = performance.now();
    this.firstStartedAt ??= startedAt;
    const latest = this.#latestStarted.get(stream);
    if (latest !== undefined && seq < latest) this.#inversions++;
    if (latest === undefined || seq > latest) this.#latestStarted.set(stream, seq);
    const running = this.#running.get(stream) ?? 0;
    if (running > 0) this.#overlaps++;
    this.#running.set(stream, running + 1);
    return { stream, seq, startedAt };
  }

  /** The call start() returned ends. */
  finish(call: Call): void {
    const latest = this.#latestFinished.get(call.stream);
    if (latest !== undefined && call.seq < latest) this.#finishInversions++;
    if (latest === undefined || call.seq > latest) this.#latestFinished.set(call.stream, call.seq);
    this.#calls++;
    this.#callMs += performance.now() - call.startedAt;
    this.#running.set(call.stream, (this.#running.get(call.stream) ?? 1) - 1);
  }

  get inversions(): number {
    return this.#inversions;
  }

  get finishInversions(): number {
    return this.#finishInversions;
  }

  get overlaps(): number {
    return this.#overlaps;
  }

  /** Mean time from start() to finish() over the finished calls (ms; NaN before any). */
  get meanCallMs(): number {
    return this.#callMs / this.#calls;
  }
}

// @ts-check
// Lag and throughput over time, per consumer row, from the polls of this page.
//
// Throughput is computed here rather than kept on the server: each poll of `GET consumers` gives
// every cursor, and the ids a cursor passed between two polls, over the time between them, is the
// rate at which that consumer gets through the log. The server keeps no history and does no work
// while nobody watches (a consumer at the head costs nothing: docs/guarantees.md), so the charts
// start when the page opens (a reload keeps them: the entry module saves them for the tab). A
// cursor passes ids that never committed and tombstones too, so this is "log positions per
// second", close to events per second; the exact count of handled events is the metric
// `sluice.events.processed` (docs/operating.md).

/** How much history the charts show. */
export const HISTORY_MS = 15 * 60 * 1000;

/**
 * One poll's reading of a consumer row.
 * @typedef {object} Sample
 * @property {number} t when the answer arrived (this browser's clock, ms)
 * @property {number} lag events behind the head
 * @property {string} cursor the cursor, a decimal bigint
 * @property {number | null} rate ids per second the cursor passed since the previous sample;
 *   null for the first sample and after the cursor moved back (a restart)
 */

/** @typedef {Record<string, Sample[]>} SavedHistory */

export class History {
  constructor() {
    /** @type {Map<string, Sample[]>} */
    this.byKey = new Map();
  }

  /**
   * Adds a poll's reading and forgets what is older than {@link HISTORY_MS}.
   * @param {string} key @param {number} t @param {string} cursor @param {string | number} lagEvents
   */
  record(key, t, cursor, lagEvents) {
    const samples = this.byKey.get(key) ?? [];
    const previous = samples[samples.length - 1];
    let rate = null;
    if (previous && t > previous.t) {
      const passed = Number(BigInt(cursor) - BigInt(previous.cursor));
      rate = passed >= 0 ? (passed * 1000) / (t - previous.t) : null;
    }
    if (previous && t <= previous.t) return;
    samples.push({ t, lag: Number(lagEvents) || 0, cursor, rate });
    while (samples.length > 0 && (samples[0]?.t ?? t) < t - HISTORY_MS) samples.shift();
    this.byKey.set(key, samples);
  }

  /** @param {string} key @returns {readonly Sample[]} */
  samples(key) {
    return this.byKey.get(key) ?? [];
  }

  /** Forgets the rows not in `keys` (consumers that are gone). @param {Set<string>} keys */
  keepOnly(keys) {
    for (const key of this.byKey.keys()) if (!keys.has(key)) this.byKey.delete(key);
  }

  /** @returns {SavedHistory} */
  save() {
    return Object.fromEntries(this.byKey);
  }

  /**
   * Restores saved samples younger than {@link HISTORY_MS}; anything malformed is dropped.
   * @param {unknown} saved @param {number} now
   */
  restore(saved, now) {
    if (typeof saved !== 'object' || saved === null) return;
    for (const [key, value] of Object.entries(saved)) {
      if (!Array.isArray(value)) continue;
      /** @type {Sample[]} */
      const samples = [];
      for (const item of /** @type {unknown[]} */ (value)) {
        const s = /** @type {Partial<Sample>} */ (item);
        if (
          typeof s.t === 'number' &&
          s.t >= now - HISTORY_MS &&
          s.t <= now &&
          typeof s.lag === 'number' &&
          typeof s.cursor === 'string' &&
          /^[0-9]{1,19}$/.test(s.cursor) &&
          (s.rate === null || typeof s.rate === 'number')
        ) {
          samples.push({ t: s.t, lag: s.lag, cursor: s.cursor, rate: s.rate ?? null });
        }
      }
      if (samples.length > 0) this.byKey.set(key, samples);
    }
  }
}

/**
 * The figures a chart's label states: the latest lag and rate, their peaks, the rate's mean.
 * @param {readonly Sample[]} samples
 */
export function summarize(samples) {
  const last = samples[samples.length - 1];
  const rates = samples.map((s) => s.rate).filter(/** @returns {r is number} */ (r) => r !== null);
  return {
    count: samples.length,
    lagNow: last ? last.lag : null,
    lagPeak: samples.reduce((max, s) => Math.max(max, s.lag), 0),
    rateNow: rates.length > 0 ? (rates[rates.length - 1] ?? 0) : null,
    ratePeak: rates.reduce((max, r) => Math.max(max, r), 0),
    rateMean: rates.length > 0 ? rates.reduce((sum, r) => sum + r, 0) / rates.length : null,
  };
}

/** The spans of time a chart shows, in minutes, with the step of its time axis. */
const SPANS = [
  { minutes: 1, step: 0.5 },
  { minutes: 2, step: 1 },
  { minutes: 3, step: 1 },
  { minutes: 5, step: 1 },
  { minutes: 10, step: 2 },
  { minutes: 15, step: 5 },
];

/**
 * The span of time the charts show: the shortest of 1, 2, 3, 5, 10 and 15 minutes that holds every
 * sample. A page open for two minutes charts those two minutes over the chart's whole width, not a
 * sliver at the end of a quarter-hour.
 * @param {readonly Sample[]} samples @param {number} now
 * @returns {{ spanMs: number, ticks: string[] }} the span and its time axis labels, oldest first
 */
export function spanOf(samples, now) {
  const elapsedMs = now - (samples[0]?.t ?? now);
  const { minutes, step } = SPANS.find((s) => s.minutes * 60_000 >= elapsedMs) ?? { minutes: 15, step: 5 };
  /** @type {string[]} */
  const ticks = [];
  for (let ago = minutes; ago > 0; ago -= step) {
    const text = Number.isInteger(ago) ? `${ago} min` : `${Math.round(ago * 60)} s`;
    ticks.push(ago === minutes ? `${text} ago` : text);
  }
  ticks.push('now');
  return { spanMs: minutes * 60_000, ticks };
}

/**
 * The samples of the last `spanMs` in `count` equal time slices, oldest first, for the charts: per
 * slice the highest lag seen and the mean rate, null where no poll fell in it.
 * @param {readonly Sample[]} samples @param {number} now @param {number} spanMs @param {number} count
 * @returns {{ lag: (number | null)[], rate: (number | null)[] }}
 */
export function slices(samples, now, spanMs, count) {
  const width = spanMs / count;
  const start = now - spanMs;
  /** @type {(number | null)[]} */
  const lag = new Array(count).fill(null);
  /** @type {number[]} */
  const rateSum = new Array(count).fill(0);
  /** @type {number[]} */
  const rateCount = new Array(count).fill(0);
  for (const s of samples) {
    if (s.t < start || s.t > now) continue;
    const i = Math.min(count - 1, Math.floor((s.t - start) / width));
    lag[i] = Math.max(lag[i] ?? 0, s.lag);
    if (s.rate !== null) {
      rateSum[i] = (rateSum[i] ?? 0) + s.rate;
      rateCount[i] = (rateCount[i] ?? 0) + 1;
    }
  }
  const rate = rateSum.map((sum, i) => ((rateCount[i] ?? 0) > 0 ? sum / (rateCount[i] ?? 1) : null));
  return { lag, rate };
}

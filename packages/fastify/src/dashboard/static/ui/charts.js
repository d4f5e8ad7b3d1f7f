// @ts-check
// Lag and throughput charts, drawn as inline SVG (the Content-Security-Policy allows no code from
// elsewhere, and none is needed). Plots stretch to their box (preserveAspectRatio none) with
// strokes that do not scale, so one drawing fits a table cell, a phone-wide card and a panel;
// their labels are HTML around them, at the page's own font size.
import { el, svg } from './dom.js';
import { formatCount, formatRate, plural } from './format.js';
import { slices, spanOf, summarize } from './history.js';
import { REFRESH_MS } from './state.js';

/** @typedef {import('./history.js').Sample} Sample */

/** The plot's coordinate box; the SVG stretches it to whatever box CSS gives it. */
const BOX = { width: 600, height: 100, pad: 6 };

/**
 * The top of a chart's scale: the highest value rounded up to 1, 2 or 5 times a power of ten, so
 * the label reads well and a line at the peak stays inside the plot.
 * @param {number} peak
 */
export function niceMax(peak) {
  if (!(peak > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(peak));
  for (const step of [1, 2, 5, 10]) if (peak <= step * power) return step * power;
  return 10 * power;
}

/** Empty slices a line is drawn across. */
const MAX_JOINED_SLICES = 2;

/**
 * How many slices a chart of `spanMs` has: at most `most`, and none shorter than a poll interval,
 * so that most slices hold a sample.
 * @param {number} spanMs @param {number} most
 */
function sliceCount(spanMs, most) {
  return Math.max(1, Math.min(most, Math.floor(spanMs / REFRESH_MS)));
}

/**
 * Draws values as a line (gaps where a slice has none) into a plot.
 * @param {SVGSVGElement} plot @param {(number | null)[]} values @param {number} max
 */
function drawLine(plot, values, max) {
  const step = BOX.width / values.length;
  const y = (/** @type {number} */ v) => BOX.height - BOX.pad - (v / max) * (BOX.height - 2 * BOX.pad);
  /** @type {string[][]} */
  const runs = [];
  let run = /** @type {string[] | null} */ (null);
  let last = /** @type {[number, number] | null} */ (null);
  let empty = 0;
  values.forEach((v, i) => {
    if (v === null) {
      // A slice no poll fell in is joined over; a longer silence (a paused or hidden page) breaks the line.
      empty += 1;
      if (empty > MAX_JOINED_SLICES) run = null;
      return;
    }
    empty = 0;
    const point = /** @type {[number, number]} */ ([(i + 0.5) * step, y(v)]);
    if (run === null) {
      run = [];
      runs.push(run);
    }
    run.push(`${point[0].toFixed(1)},${point[1].toFixed(1)}`);
    last = point;
  });
  for (const points of runs) {
    // A lone point has no length: a line to itself with a round cap shows it as a dot.
    const drawn = points.length === 1 ? [points[0], points[0]] : points;
    plot.append(
      svg('polyline', {
        class: 'chart-line',
        points: drawn.join(' '),
        'vector-effect': 'non-scaling-stroke',
      }),
    );
  }
  if (last) {
    const [x, yLast] = last;
    plot.append(
      svg('line', {
        class: 'chart-dot',
        x1: x.toFixed(1),
        y1: yLast.toFixed(1),
        x2: x.toFixed(1),
        y2: yLast.toFixed(1),
        'vector-effect': 'non-scaling-stroke',
      }),
    );
  }
}

/**
 * Draws values as bars (none where a slice has no value) into a plot.
 * @param {SVGSVGElement} plot @param {(number | null)[]} values @param {number} max
 */
function drawBars(plot, values, max) {
  const step = BOX.width / values.length;
  const gap = Math.min(1.5, step * 0.15);
  values.forEach((v, i) => {
    if (v === null) return;
    const height = v > 0 ? Math.max(1.5, (v / max) * (BOX.height - BOX.pad)) : 0.75;
    plot.append(
      svg('rect', {
        class: v > 0 ? 'chart-bar' : 'chart-bar chart-bar-zero',
        x: (i * step + gap).toFixed(1),
        y: (BOX.height - height).toFixed(1),
        width: Math.max(0.5, step - 2 * gap).toFixed(1),
        height: height.toFixed(1),
      }),
    );
  });
}

/** @param {string} label */
function plotElement(label) {
  return svg(
    'svg',
    {
      class: 'chart-plot',
      viewBox: `0 0 ${BOX.width} ${BOX.height}`,
      preserveAspectRatio: 'none',
      role: 'img',
      'aria-label': label,
    },
    svg('title', { text: label }),
    svg('line', {
      class: 'chart-axis',
      x1: 0,
      y1: BOX.height - 0.5,
      x2: BOX.width,
      y2: BOX.height - 0.5,
      'vector-effect': 'non-scaling-stroke',
    }),
  );
}

/**
 * What the charts say in words, for their accessible names and titles.
 * @param {readonly Sample[]} samples @param {string} span "the last 2 min"
 */
function describe(samples, span) {
  const s = summarize(samples);
  const over = `over ${span} (${plural(s.count, 'sample')})`;
  return {
    summary: s,
    lag:
      s.lagNow === null
        ? 'No lag samples yet'
        : `Lag ${over}: now ${plural(s.lagNow, 'event')}, highest ${plural(s.lagPeak, 'event')}`,
    rate:
      s.rateNow === null
        ? 'No throughput samples yet: the rate needs two polls'
        : `Throughput ${over}: now ${formatRate(s.rateNow)} events/s, ` +
          `highest ${formatRate(s.ratePeak)}, mean ${formatRate(s.rateMean ?? 0)}`,
  };
}

/** "the last 2 minutes". @param {number} spanMs */
function spanWords(spanMs) {
  return `the last ${plural(spanMs / 60_000, 'minute')}`;
}

/** The top of the lag scale: counts are whole, so a scale of 2 gives a middle line at 1. @param {number} peak */
function lagMax(peak) {
  return Math.max(2, niceMax(peak));
}

/** Slices in a table cell's chart. */
const CELL_SLICES = 45;
/** Slices in a panel's chart. */
const PANEL_SLICES = 90;

/**
 * The small chart of a consumer row: lag as a line above throughput as bars, with the latest
 * figures beside. The element carries `data-lag-points` and `data-rate-points`, the number of
 * samples each series has.
 * @param {readonly Sample[]} samples @param {number} now
 */
export function trendCell(samples, now) {
  const { spanMs } = spanOf(samples, now);
  const { lag, rate } = slices(samples, now, spanMs, sliceCount(spanMs, CELL_SLICES));
  const words = describe(samples, spanWords(spanMs));
  const { summary } = words;
  const lagPlot = plotElement(words.lag);
  drawLine(lagPlot, lag, lagMax(summary.lagPeak));
  const ratePlot = plotElement(words.rate);
  drawBars(ratePlot, rate, niceMax(summary.ratePeak));
  const rates = samples.filter((s) => s.rate !== null).length;
  return el(
    'div',
    { class: 'trend', 'data-lag-points': samples.length, 'data-rate-points': rates },
    el(
      'div',
      { class: 'trend-row' },
      el('span', { class: 'trend-plot trend-lag' }, lagPlot),
      el('span', {
        class: 'trend-figure',
        title: 'events behind the head now',
        text: summary.lagNow === null ? '—' : formatCount(summary.lagNow),
      }),
    ),
    el(
      'div',
      { class: 'trend-row' },
      el('span', { class: 'trend-plot trend-rate' }, ratePlot),
      el('span', {
        class: 'trend-figure',
        title: 'events per second, at the last poll',
        text: summary.rateNow === null ? '—' : `${formatRate(summary.rateNow)}/s`,
      }),
    ),
  );
}

/**
 * A panel's chart of one series, with its scale and time axis.
 * @param {'lag' | 'rate'} kind @param {readonly Sample[]} samples @param {number} now
 */
export function trendFigure(kind, samples, now) {
  const { spanMs, ticks } = spanOf(samples, now);
  const series = slices(samples, now, spanMs, sliceCount(spanMs, PANEL_SLICES));
  const words = describe(samples, spanWords(spanMs));
  const { summary } = words;
  const peak = kind === 'lag' ? summary.lagPeak : summary.ratePeak;
  const max = kind === 'lag' ? lagMax(peak) : niceMax(peak);
  const plot = plotElement(kind === 'lag' ? words.lag : words.rate);
  for (const fraction of [0.5, 1]) {
    const y = BOX.height - BOX.pad - fraction * (BOX.height - 2 * BOX.pad);
    plot.append(
      svg('line', {
        class: 'chart-grid',
        x1: 0,
        y1: y.toFixed(1),
        x2: BOX.width,
        y2: y.toFixed(1),
        'vector-effect': 'non-scaling-stroke',
      }),
    );
  }
  if (kind === 'lag') drawLine(plot, series.lag, max);
  else drawBars(plot, series.rate, max);
  const format = kind === 'lag' ? formatCount : formatRate;
  const title = kind === 'lag' ? 'Lag (events behind the head)' : 'Throughput (events per second)';
  const now_ = kind === 'lag' ? summary.lagNow : summary.rateNow;
  const figures =
    now_ === null
      ? 'no samples yet'
      : `now ${format(now_)}, highest ${format(peak)}` +
        (kind === 'rate' && summary.rateMean !== null ? `, mean ${format(summary.rateMean)}` : '');
  return el(
    'figure',
    {
      class: `chart chart-${kind}`,
      'data-chart': kind,
      'data-points': kind === 'lag' ? samples.length : samples.filter((s) => s.rate !== null).length,
    },
    el('figcaption', {}, el('span', { class: 'chart-title', text: title }), ` ${figures}`),
    el(
      'div',
      { class: 'chart-area' },
      el(
        'div',
        { class: 'chart-scale', 'aria-hidden': 'true' },
        el('span', { text: format(max) }),
        el('span', { text: format(max / 2) }),
        el('span', { text: '0' }),
      ),
      el('div', { class: 'chart-box' }, plot),
    ),
    el('div', { class: 'chart-time', 'aria-hidden': 'true' }, ...ticks.map((text) => el('span', { text }))),
  );
}

// @ts-check
// Formatting of durations, times, counts and consumer labels.
import { el } from './dom.js';
import { laneLabel } from './policy.js';

/** @param {number | null | undefined} seconds */
export function formatDuration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return '—';
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h} h ${m % 60} min`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}

/** Seconds from an ISO time to now (negative in the future), null without a time. @param {string | null | undefined} iso */
export function secondsSince(iso) {
  if (!iso) return null;
  const at = Date.parse(iso);
  return Number.isNaN(at) ? null : (Date.now() - at) / 1000;
}

/**
 * A `<time>` element: "12 s ago", with the exact time as its title.
 * @param {string | null | undefined} iso @param {string} [never]
 */
export function timeAgo(iso, never = 'never') {
  const seconds = secondsSince(iso);
  if (!iso || seconds === null) return el('span', { class: 'muted', text: never });
  const text = seconds < 0 ? `in ${formatDuration(-seconds)}` : `${formatDuration(seconds)} ago`;
  return el('time', { datetime: iso, title: new Date(iso).toLocaleString(), text });
}

/** @param {string | null | undefined} iso */
export function clockTime(iso) {
  if (!iso) return '—';
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
}

/** "1 event", "3 events". @param {number | string} count @param {string} one @param {string} [many] */
export function plural(count, one, many = `${one}s`) {
  return `${count} ${Number(count) === 1 ? one : many}`;
}

/** An events-per-second rate, short: "0", "0.4", "12", "1.2k". @param {number} perSecond */
export function formatRate(perSecond) {
  if (!Number.isFinite(perSecond) || perSecond <= 0) return '0';
  if (perSecond < 10) return perSecond.toFixed(1).replace(/\.0$/, '');
  if (perSecond < 1000) return String(Math.round(perSecond));
  return `${(perSecond / 1000).toFixed(1).replace(/\.0$/, '')}k`;
}

/** A count, short: "950", "12k", "3.4M". @param {number} count */
export function formatCount(count) {
  if (!Number.isFinite(count)) return '—';
  if (Math.abs(count) < 10_000) return String(Math.round(count));
  if (Math.abs(count) < 1_000_000) return `${Math.round(count / 1000)}k`;
  return `${(count / 1_000_000).toFixed(1).replace(/\.0$/, '')}M`;
}

/**
 * `mailer`, `mailer (instance web-1)`, or `mailer (lane 1 of 3)` for the row `*1/3`.
 * @param {import('./types.js').ConsumerKey & { lane?: import('./types.js').Lane | null }} c
 */
export function labelOf(c) {
  if (c.instanceId === '*') return c.name;
  const lane = laneLabel(c);
  return lane ? `${c.name} (${lane})` : `${c.name} (instance ${c.instanceId})`;
}

/** The key of a consumer row in the dashboard's maps. @param {import('./types.js').ConsumerKey} c */
export function keyOf(c) {
  return `${c.name}\u0000${c.instanceId}`;
}

/** @param {string} text @param {number} max */
export function truncate(text, max) {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

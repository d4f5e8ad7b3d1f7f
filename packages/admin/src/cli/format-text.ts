/** One line: runs of whitespace (newlines of stack traces, tabs) become a single space. */
export function oneLine(text: string): string {
  return text.replace(/\s+/g, ' ').trim();
}

const segmenter = new Intl.Segmenter();

/** The user-perceived characters of a text (a flag or an accented letter counts once). */
export function graphemes(text: string): string[] {
  return Array.from(segmenter.segment(text), (s) => s.segment);
}

/** At most `max` characters, with an ellipsis when cut. */
export function truncate(text: string, max: number): string {
  const chars = graphemes(text);
  return chars.length <= max ? text : `${chars.slice(0, max - 1).join('')}…`;
}

/** A short age: 45s, 12m, 3h, 2d. */
export function formatAge(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 120) return `${s}s`;
  if (s < 2 * 3600) return `${Math.round(s / 60)}m`;
  if (s < 2 * 86_400) return `${Math.round(s / 3600)}h`;
  return `${Math.round(s / 86_400)}d`;
}

/** A date for tables: ISO 8601 in UTC, to the second. */
export function formatTime(date: Date | null): string {
  return date === null ? '-' : date.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/**
 * A parked key as tables and messages show it: as it is, or JSON-quoted when it is empty or has
 * spaces, quotes, backslashes or control characters (`--json` gives every key as it is).
 */
export function keyText(key: string): string {
  return /^[^\s"'\\\p{C}]+$/u.test(key) ? key : JSON.stringify(key);
}

/**
 * `text` as it may reach a terminal. Control characters (but newline and tab), line and paragraph
 * separators, and bidirectional marks and overrides, which event data, errors and names may hold,
 * are written as `\uXXXX`: they can neither move the cursor, clear the screen or set the window
 * title, nor reorder what is shown. JSON keeps its meaning: `\uXXXX` is how JSON writes the same
 * character.
 */
export function terminalSafe(text: string): string {
  return text.replace(UNSAFE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** What {@link terminalSafe} escapes. */
export const UNSAFE =
  // eslint-disable-next-line no-control-regex -- the control characters are what is matched
  /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

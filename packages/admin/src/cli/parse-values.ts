import { checkName, checkText, parseEventId } from '../validate.js';
import { UsageError } from './usage-error.js';

// Values typed on a command line are parsed strictly: `Number('1e3')`, `Number(' 7 ')` or
// `new Date('1')` would each accept a typo and act on something the operator did not mean.

/** The largest `--limit` the admin API takes. */
const MAX_LIMIT = 1000;

/** A count (`--limit`): digits only, 1 to 1000 as the admin API takes it. */
export function parseLimit(text: string, option = '--limit'): number {
  if (!/^[0-9]{1,9}$/.test(text))
    throw new UsageError(`${option} must be a positive integer (digits only), got "${text}"`);
  const limit = Number(text);
  if (limit < 1 || limit > MAX_LIMIT)
    throw new UsageError(`${option} must be between 1 and ${MAX_LIMIT}, got ${limit}`);
  return limit;
}

/**
 * A consumer name or instance id as the admin API takes it (1–200 bytes, no NUL). Checked with
 * the command line, so a bad one is a usage error before any database is looked for.
 */
export function parseName(text: string, what: string): string {
  return checkName(text, what);
}

/** `parseName` for an option that may be absent. */
export function optionalName(text: string | undefined, option: string): string | undefined {
  return text === undefined ? undefined : checkName(text, option);
}

/** `--reason`: at most 1000 bytes, no NUL. */
export function parseReason(text: string | undefined): string | undefined {
  return checkText(text, '--reason');
}

/**
 * `--key`: a parked key as `sluice parked` shows it (format-text.ts, keyText): as it is, or, in
 * double quotes, a JSON string (a key that is empty or holds blanks, quotes, backslashes or control
 * characters is shown so). At most 1000 bytes, no NUL. The empty string is a key too (an event
 * without the consumer's laneKey field is keyed ''): `--key ''` or `--key '""'` names it.
 */
export function parseKey(text: string | undefined, option = '--key'): string {
  let key = text ?? '';
  if (key.length >= 2 && key.startsWith('"') && key.endsWith('"')) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(key);
    } catch {
      parsed = undefined;
    }
    if (typeof parsed !== 'string') {
      throw new UsageError(
        `${option} in double quotes is read as sluice parked shows a key, a JSON string, and ${key} is not one`,
      );
    }
    key = parsed;
  }
  return checkText(key, option, 1000) ?? '';
}

/** The most lanes a consumer may run as (MAX_LANES in @sluice/core, which relane() checks too). */
const MAX_LANES = 1024;

/** `--lanes` of relane: digits only, 1 to 1024. */
export function parseLaneCount(text: string, option = '--lanes'): number {
  if (!/^[0-9]{1,9}$/.test(text))
    throw new UsageError(`${option} must be a positive integer (digits only), got "${text}"`);
  const lanes = Number(text);
  if (lanes < 1 || lanes > MAX_LANES)
    throw new UsageError(`${option} must be between 1 and ${MAX_LANES}, got ${lanes}`);
  return lanes;
}

/**
 * An id typed on the command line (an event's, a dead letter's): anything but 1 to 19 digits is a
 * usage error (malformed); an id of that form the admin API refuses (0, beyond a bigint) is its
 * SLUICE_INVALID_OPTION.
 */
export function parseEventIdText(text: string | undefined, option: string): bigint {
  if (text === undefined || !/^[0-9]{1,19}$/.test(text)) {
    throw new UsageError(`${option} must be a positive integer id (digits only), got "${text ?? ''}"`);
  }
  return parseEventId(text, option);
}

/** A comma-separated list of ids (`--ids 1,2,3`). */
export function parseIdList(text: string, option: string): bigint[] {
  const parts = text.split(',').map((part) => part.trim());
  if (parts.some((part) => part === '')) {
    throw new UsageError(`${option} must be a comma-separated list of ids like 1,2,3, got "${text}"`);
  }
  return parts.map((part) => parseEventIdText(part, option));
}

/** `--from` of restart: 'beginning', 'now', or the id after which to continue (0 or more). */
export function parseRestartFrom(text: string): 'beginning' | 'now' | bigint {
  if (text === 'beginning' || text === 'now') return text;
  if (text === '0') return 0n;
  if (!/^[0-9]{1,19}$/.test(text)) {
    throw new UsageError(
      `--from must be 'beginning', 'now' or an event id (digits, 0 or more), got "${text}"`,
    );
  }
  return parseEventIdText(text, '--from');
}

const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/** A duration like 90s, 30m, 2h, 1d or 1h30m, in milliseconds; more than zero. */
export function parseDurationMs(text: string, option: string): number {
  const invalid = () =>
    new UsageError(`${option} must be a duration like 90s, 30m, 2h, 1d or 1h30m, got "${text}"`);
  if (!/^([0-9]{1,9}(ms|s|m|h|d))+$/.test(text)) throw invalid();
  let total = 0;
  for (const match of text.matchAll(/([0-9]+)(ms|s|m|h|d)/g)) {
    const [, amount, unit] = match;
    total += Number(amount) * UNIT_MS[unit as keyof typeof UNIT_MS];
  }
  if (total <= 0 || !Number.isSafeInteger(total)) throw invalid();
  return total;
}

const ISO_TIME =
  /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2})$/i;

/**
 * An ISO 8601 time with a time zone (`2025-06-01T12:00:00Z`, `2025-06-01T14:00+02:00`). A time
 * without a zone is refused: JavaScript reads it as local time, a date alone as UTC.
 */
export function parseTime(text: string, option: string): Date {
  const match = ISO_TIME.exec(text);
  const date = new Date(text);
  const invalid = () =>
    new UsageError(
      `${option} must be an ISO 8601 time with a time zone, like 2025-06-01T12:00:00Z, got "${text}"`,
    );
  if (match?.[5] === '59' && match[6] === '60') {
    throw new UsageError(
      `${option} ${text} is a leap second, which Sluice cannot hold: give the second after it`,
    );
  }
  if (!match || Number.isNaN(date.getTime())) throw invalid();
  const [, year, month, day, hour, minute, second] = match;
  // new Date() rolls 2025-02-30 over to March: check the fields it was given.
  const fields = new Date(Date.UTC(Number(year), Number(month) - 1, Number(day)));
  if (
    fields.getUTCMonth() !== Number(month) - 1 ||
    fields.getUTCDate() !== Number(day) ||
    Number(hour) > 23 ||
    Number(minute) > 59 ||
    Number(second ?? 0) > 59
  ) {
    throw invalid();
  }
  return date;
}

/** `--version` of a rebuild: digits only, 1 or more. */
export function parseVersion(text: string, option = '--version'): number {
  if (!/^[0-9]+$/.test(text)) {
    throw new UsageError(`${option} must be a version number (digits only, 1 or more), got "${text}"`);
  }
  if (text.length > 10 || Number(text) < 1 || Number(text) > 2_147_483_647) {
    throw new UsageError(`${option} must be a version number from 1 to 2147483647, got ${text}`);
  }
  return Number(text);
}

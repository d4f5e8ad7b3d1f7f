// @ts-check
// What the dashboard's modules share: the page's settings, the last poll, the open panel.
import { History } from './history.js';

/** How often the consumers are polled. */
export const REFRESH_MS = 2000;
/** How many dead letters the panel lists. */
export const DEAD_LETTER_LIMIT = 100;
/** How many parked keys the panel lists, and how many of a key's events the payload dialog shows. */
export const PARKED_LIMIT = 100;

/** The server refuses writes here: the page offers none (set by the server in the page). */
export const readOnly = document.body.getAttribute('data-read-only') === 'true';
/**
 * How this page authenticates: 'browser' when the browser prompts for (Basic) credentials by
 * itself, 'token' when the page must ask for a bearer token (set by the server in the page).
 */
export const authMode = document.body.getAttribute('data-auth') === 'token' ? 'token' : 'browser';

/**
 * @typedef {object} Detail the open detail panel
 * @property {'diagnose' | 'dead-letters' | 'parked-keys' | 'trends'} kind
 * @property {string} key
 * @property {import('./types.js').ConsumerSummary} consumer
 * @property {HTMLElement | null} opener
 * @property {number} parkedKeys the consumer's parked keys when the panel was last loaded: the
 *   parked-keys panel reloads when a poll sees another count (a replayed key gone)
 */

export const state = {
  paused: false,
  /** Modal dialogs open: polling waits, since the page behind them is inert. */
  modals: 0,
  loading: false,
  /** @type {ReturnType<typeof setTimeout> | undefined} */
  timer: undefined,
  /** @type {Date | null} */
  lastSuccess: null,
  lastFailed: false,
  /** The API answered 401 and the page waits for a token. */
  signedOut: false,
  /** key → the consumer row of the last poll. @type {Map<string, import('./types.js').ConsumerSummary>} */
  consumers: new Map(),
  history: new History(),
  /** @type {Detail | null} */
  detail: null,
  /** consumer name → its versions and rebuild, as of the last poll. @type {Map<string, import('./types.js').RebuildStatus>} */
  rebuilds: new Map(),
};

/**
 * What other modules may ask the entry module to do, without importing it (which would be a
 * cycle): set once at start.
 */
export const hooks = {
  /** Polls the consumers now. */
  poll: () => {},
  /** Reloads the open detail panel. */
  refreshDetail: () => {},
};

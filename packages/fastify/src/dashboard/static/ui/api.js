// @ts-check
// The ops API of the page's own prefix, and the bearer token it may need.

const TOKEN_KEY = 'sluice.ops.token';

/**
 * The ops routes sit next to the page: it is served at `<prefix>/` and `<prefix>/dashboard`.
 * @param {string} pathname
 */
export function apiBaseOf(pathname) {
  if (pathname.endsWith('/dashboard')) return pathname.slice(0, -'dashboard'.length);
  return pathname.endsWith('/') ? pathname : `${pathname}/`;
}

// From the origin: a page opened with a user and password in its address resolves relative URLs
// with them, which fetch() refuses ("Request cannot be constructed from a URL that includes
// credentials"); the browser sends the credentials it was given on its own.
const apiBase = location.origin + apiBaseOf(location.pathname);

/** An answer of the ops API other than 2xx; status 0 when the server could not be reached. */
export class ApiError extends Error {
  /** @param {number} status @param {string} code @param {string} message */
  constructor(status, code, message) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
  }
}

/** The token for this tab only: memory when storage is refused (private mode, policy). */
let memoryToken = '';

/** The bearer token of this tab, '' when none. */
export function readToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY) ?? '';
  } catch {
    return memoryToken;
  }
}

/**
 * Keeps the token in sessionStorage: it lives as long as the tab and is never shared with other
 * tabs or written to disk for later sessions, as localStorage would. '' forgets it.
 * @param {string} token
 */
export function writeToken(token) {
  memoryToken = token;
  try {
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    // Storage refused: the token lives in memory for this page.
  }
}

/**
 * Calls an ops route relative to the page's prefix: `Authorization: Bearer` when a token is set
 * (the browser adds Basic credentials it has by itself), JSON bodies for writes (the server
 * refuses writes of any other type). Rejects with an ApiError carrying the server's message.
 * @param {'GET' | 'POST'} method
 * @param {string} path
 * @param {object} [body]
 * @returns {Promise<unknown>}
 */
export async function api(method, path, body) {
  /** @type {Record<string, string>} */
  const headers = { 'content-type': 'application/json' };
  const token = readToken();
  if (token) headers['authorization'] = `Bearer ${token}`;
  /** @type {RequestInit} */
  const init = { method, credentials: 'same-origin', headers, cache: 'no-store' };
  // Fastify refuses an empty JSON body: every POST sends an object.
  if (method !== 'GET') init.body = JSON.stringify(body ?? {});
  let response;
  try {
    response = await fetch(apiBase + path, init);
  } catch (error) {
    const why = error instanceof Error ? error.message : String(error);
    throw new ApiError(0, 'NETWORK', `cannot reach the server (${why})`);
  }
  const text = await response.text().catch(() => '');
  /** @type {unknown} */
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    const fields =
      typeof data === 'object' && data !== null ? /** @type {Record<string, unknown>} */ (data) : {};
    const message =
      typeof fields['message'] === 'string' ? fields['message'] : response.statusText || 'request failed';
    throw new ApiError(response.status, typeof fields['code'] === 'string' ? fields['code'] : '', message);
  }
  return data;
}

/** `consumers/<name><suffix>`. @param {import('./types.js').ConsumerKey} c @param {string} [suffix] */
export function consumerPath(c, suffix = '') {
  return `consumers/${encodeURIComponent(c.name)}${suffix}`;
}

/**
 * The query naming a per-instance row.
 * @param {import('./types.js').ConsumerKey} c @param {Record<string, string>} [extra]
 */
export function queryOf(c, extra = {}) {
  const params = new URLSearchParams(extra);
  if (c.instanceId !== '*') params.set('instance', c.instanceId);
  const query = params.toString();
  return query ? `?${query}` : '';
}

/** The body fields naming a per-instance row. @param {import('./types.js').ConsumerKey} c */
export function instanceBody(c) {
  return c.instanceId === '*' ? {} : { instanceId: c.instanceId };
}

/** @param {unknown} error */
export function describeError(error) {
  if (error instanceof ApiError) {
    if (error.status === 0) return error.message;
    if (error.status === 401) return 'not authorised (401): the server refused these credentials';
    return `${error.message} (${error.status}${error.code ? ` ${error.code}` : ''})`;
  }
  return error instanceof Error ? error.message : String(error);
}

// The Sluice ops dashboard: a plain browser script (no modules, no dependencies), served with a
// strict Content-Security-Policy. It polls the ops routes of its own prefix and offers the
// operator actions documented in docs/operating.md. Everything it shows goes through textContent.
(() => {
  'use strict';

  const REFRESH_MS = 2000;
  const HISTORY_MS = 5 * 60 * 1000;
  const TOKEN_KEY = 'sluice.ops.token';
  const ERROR_PREVIEW_CHARS = 80;
  const DEAD_LETTER_LIMIT = 100;
  const SPARK = { width: 120, height: 28, pad: 2 };

  const byId = (id) => document.getElementById(id);
  const readOnly = document.body.getAttribute('data-read-only') === 'true';

  /**
   * The ops routes sit next to the page: it is served at `<prefix>/` and `<prefix>/dashboard`.
   * @param {string} pathname
   */
  function apiBaseOf(pathname) {
    if (pathname.endsWith('/dashboard')) return pathname.slice(0, -'dashboard'.length);
    return pathname.endsWith('/') ? pathname : `${pathname}/`;
  }
  const apiBase = apiBaseOf(location.pathname);

  const state = {
    paused: false,
    dialogOpen: false,
    loading: false,
    timer: undefined,
    lastSuccess: null,
    lastFailed: false,
    /** key → the consumer summary of the last poll */
    consumers: new Map(),
    /** key → the row's elements */
    rows: new Map(),
    /** key → [{ t, v }] lag samples of the last five minutes */
    history: new Map(),
    /** the open detail panel: { kind, key, consumer, opener } */
    detail: null,
    /** the open dialog: { onConfirm, opener, busy, ready } */
    dialog: null,
    memoryToken: '',
  };
  let uniqueId = 0;

  // ---------------------------------------------------------------------------------------------
  // DOM helpers

  /**
   * Creates an element. Attribute values and children are set as text, never parsed as HTML.
   * @param {string} tag
   * @param {Record<string, unknown>} [attributes]
   * @param {...(Node | string | null | undefined | false)} children
   */
  function el(tag, attributes = {}, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes)) {
      if (value === undefined || value === null || value === false) continue;
      if (name === 'text') node.textContent = String(value);
      else if (name === 'class') node.className = String(value);
      else node.setAttribute(name, value === true ? '' : String(value));
    }
    for (const child of children) {
      if (child !== undefined && child !== null && child !== false) node.append(child);
    }
    return node;
  }

  /** @param {string} prefix */
  function nextId(prefix) {
    uniqueId += 1;
    return `${prefix}-${uniqueId}`;
  }

  // ---------------------------------------------------------------------------------------------
  // Formatting

  /** @param {number | null | undefined} seconds */
  function formatDuration(seconds) {
    if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return '—';
    const s = Math.max(0, Math.round(seconds));
    if (s < 60) return `${s} s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m} min ${s % 60} s`;
    const h = Math.floor(m / 60);
    if (h < 48) return `${h} h ${m % 60} min`;
    return `${Math.floor(h / 24)} d ${h % 24} h`;
  }

  /** @param {string | null | undefined} iso */
  function secondsSince(iso) {
    if (!iso) return null;
    const at = Date.parse(iso);
    return Number.isNaN(at) ? null : (Date.now() - at) / 1000;
  }

  /** A `<time>` element: "12 s ago", with the exact time as its title. @param {string | null} iso */
  function timeAgo(iso, never = 'never') {
    const seconds = secondsSince(iso);
    if (seconds === null) return el('span', { class: 'muted', text: never });
    const text = seconds < 0 ? `in ${formatDuration(-seconds)}` : `${formatDuration(seconds)} ago`;
    return el('time', { datetime: iso, title: new Date(iso).toLocaleString(), text });
  }

  /** @param {string | null | undefined} iso */
  function clockTime(iso) {
    if (!iso) return '—';
    const date = new Date(iso);
    return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
  }

  /** @param {number} count @param {string} one @param {string} [many] */
  function plural(count, one, many = `${one}s`) {
    return `${count} ${Number(count) === 1 ? one : many}`;
  }

  /** @param {{ name: string, instanceId: string }} c */
  function labelOf(c) {
    return c.instanceId === '*' ? c.name : `${c.name} (instance ${c.instanceId})`;
  }

  /** @param {{ name: string, instanceId: string }} c */
  function keyOf(c) {
    return `${c.name}\u0000${c.instanceId}`;
  }

  /** @param {string} text @param {number} max */
  function truncate(text, max) {
    return text.length > max ? `${text.slice(0, max - 1)}…` : text;
  }

  // ---------------------------------------------------------------------------------------------
  // The ops API

  class ApiError extends Error {
    /** @param {number} status @param {string} code @param {string} message */
    constructor(status, code, message) {
      super(message);
      this.name = 'ApiError';
      this.status = status;
      this.code = code;
    }
  }

  function readToken() {
    try {
      return sessionStorage.getItem(TOKEN_KEY) || '';
    } catch {
      return state.memoryToken;
    }
  }

  /** @param {string} token */
  function writeToken(token) {
    state.memoryToken = token;
    try {
      if (token) sessionStorage.setItem(TOKEN_KEY, token);
      else sessionStorage.removeItem(TOKEN_KEY);
    } catch {
      // Storage refused (private mode, policy): the token lives in memory for this page.
    }
  }

  /**
   * Calls an ops route relative to the page's prefix. Rejects with an ApiError carrying the
   * server's `message` for 4xx/5xx answers, and status 0 when the server cannot be reached.
   * @param {'GET' | 'POST'} method
   * @param {string} path
   * @param {object} [body]
   */
  async function api(method, path, body) {
    const headers = { 'content-type': 'application/json' };
    const token = readToken();
    if (token) headers.authorization = `Bearer ${token}`;
    const init = { method, credentials: 'same-origin', headers, cache: 'no-store' };
    // Fastify refuses an empty JSON body: every POST sends an object.
    if (method !== 'GET') init.body = JSON.stringify(body || {});
    let response;
    try {
      response = await fetch(apiBase + path, init);
    } catch (error) {
      throw new ApiError(0, 'NETWORK', `cannot reach the server (${error && error.message})`);
    }
    const text = await response.text().catch(() => '');
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = null;
    }
    if (!response.ok) {
      const message =
        data && typeof data.message === 'string' ? data.message : response.statusText || 'request failed';
      throw new ApiError(response.status, data && typeof data.code === 'string' ? data.code : '', message);
    }
    return data;
  }

  /** @param {{ name: string }} c @param {string} [suffix] */
  function consumerPath(c, suffix = '') {
    return `consumers/${encodeURIComponent(c.name)}${suffix}`;
  }

  /** The query naming a per-instance row. @param {{ instanceId: string }} c @param {Record<string, string>} [extra] */
  function queryOf(c, extra = {}) {
    const params = new URLSearchParams(extra);
    if (c.instanceId !== '*') params.set('instance', c.instanceId);
    const query = params.toString();
    return query ? `?${query}` : '';
  }

  /** The body fields naming a per-instance row. @param {{ instanceId: string }} c */
  function instanceBody(c) {
    return c.instanceId === '*' ? {} : { instanceId: c.instanceId };
  }

  /** @param {unknown} error */
  function describeError(error) {
    if (error instanceof ApiError) {
      if (error.status === 0) return error.message;
      if (error.status === 401) return 'not authorised (401): the server refused these credentials';
      return `${error.message} (${error.status}${error.code ? ` ${error.code}` : ''})`;
    }
    return error instanceof Error ? error.message : String(error);
  }

  // ---------------------------------------------------------------------------------------------
  // Status line, error banner, result region

  function updateRefreshStatus() {
    const parts = [];
    if (state.lastSuccess) parts.push(`Last refresh ${state.lastSuccess.toLocaleTimeString()}`);
    else parts.push(state.lastFailed ? 'Not loaded yet' : 'Loading…');
    if (state.lastFailed && state.lastSuccess) parts.push('the latest attempt failed');
    if (state.paused) parts.push('auto-refresh paused');
    else if (state.dialogOpen) parts.push('auto-refresh paused while a dialog is open');
    else parts.push(`auto-refresh every ${REFRESH_MS / 1000} s`);
    byId('refresh-status').textContent = parts.join(' · ');
  }

  /** @param {string | null} message */
  function setBanner(message) {
    const banner = byId('error-banner');
    // Only a change is written: an alert region re-announces whatever is written to it.
    if (message === null) {
      if (!banner.hidden) {
        banner.hidden = true;
        banner.textContent = '';
      }
    } else if (banner.hidden || banner.textContent !== message) {
      banner.textContent = message;
      banner.hidden = false;
    }
    byId('consumers').classList.toggle('stale', message !== null);
  }

  /** @param {unknown} error */
  function pollFailureMessage(error) {
    const retry = state.paused ? '' : ` Retrying every ${REFRESH_MS / 1000} s.`;
    if (error instanceof ApiError && error.status === 401) {
      return (
        'Not authorised: the ops API answered 401. Reload the page to sign in again, or set a bearer ' +
        `token above.${retry}`
      );
    }
    if (error instanceof ApiError && error.status === 0) {
      return `Cannot reach the ops API: ${error.message}.${retry}`;
    }
    return `The ops API failed: ${describeError(error)}.${retry}`;
  }

  /** @param {string} message @param {'success' | 'error' | 'info'} kind */
  function showResult(message, kind) {
    const region = byId('result');
    region.className = `result result-${kind}`;
    region.replaceChildren(
      el('span', { class: 'result-time', text: `${new Date().toLocaleTimeString()} ` }),
      el('span', { 'data-result': kind, text: message }),
    );
  }

  // ---------------------------------------------------------------------------------------------
  // Polling

  function schedule() {
    clearTimeout(state.timer);
    state.timer = undefined;
    if (state.paused || state.dialogOpen || document.hidden) return;
    state.timer = setTimeout(() => void poll(), REFRESH_MS);
  }

  async function poll() {
    clearTimeout(state.timer);
    if (state.loading) return;
    state.loading = true;
    try {
      const consumers = await api('GET', 'consumers');
      state.lastSuccess = new Date();
      state.lastFailed = false;
      renderConsumers(Array.isArray(consumers) ? consumers : []);
      setBanner(null);
    } catch (error) {
      state.lastFailed = true;
      setBanner(pollFailureMessage(error));
      if (state.rows.size === 0) setPlaceholder('No data: see the message above.');
    } finally {
      state.loading = false;
      updateRefreshStatus();
      schedule();
    }
  }

  // ---------------------------------------------------------------------------------------------
  // The consumers table

  /** @param {string | null} text */
  function setPlaceholder(text) {
    const body = byId('consumer-rows');
    const existing = body.querySelector('tr.placeholder');
    if (text === null) {
      if (existing) existing.remove();
      return;
    }
    if (existing) existing.firstElementChild.textContent = text;
    else body.append(el('tr', { class: 'placeholder' }, el('td', { colspan: 12, text })));
  }

  /** @param {string} key @param {number} now @param {string} lagEvents */
  function recordSample(key, now, lagEvents) {
    const samples = state.history.get(key) || [];
    samples.push({ t: now, v: Number(lagEvents) || 0 });
    while (samples.length > 0 && samples[0].t < now - HISTORY_MS) samples.shift();
    state.history.set(key, samples);
  }

  /** @param {Array<Record<string, any>>} consumers */
  function renderConsumers(consumers) {
    const now = Date.now();
    const body = byId('consumer-rows');
    const seen = new Set();
    state.consumers = new Map();
    if (consumers.length > 0) setPlaceholder(null);
    let previous = null;
    for (const c of consumers) {
      const key = keyOf(c);
      seen.add(key);
      state.consumers.set(key, c);
      recordSample(key, now, c.lagEvents);
      let row = state.rows.get(key);
      if (!row) {
        row = createRow(c);
        state.rows.set(key, row);
      }
      updateRow(row, c, key, now);
      // Keep the server's order, moving a row only when needed (moving drops keyboard focus).
      const wanted = previous ? previous.tr.nextElementSibling : body.firstElementChild;
      if (wanted !== row.tr) body.insertBefore(row.tr, wanted);
      previous = row;
    }
    for (const [key, row] of state.rows) {
      if (seen.has(key)) continue;
      row.tr.remove();
      state.rows.delete(key);
      state.history.delete(key);
    }
    if (consumers.length === 0) setPlaceholder('No consumer is registered.');
  }

  /** @param {Record<string, any>} c */
  function createRow(c) {
    const label = labelOf(c);
    const tr = el('tr', { 'data-consumer': c.name, 'data-instance': c.instanceId });
    const nameCell = el(
      'th',
      { scope: 'row', class: 'col-name' },
      el('span', { class: 'consumer-name', text: c.name }),
      c.instanceId === '*' ? null : el('span', { class: 'instance', text: `instance ${c.instanceId}` }),
    );
    const cells = {
      status: el('td', { class: 'col-status' }),
      cursor: el('td', { class: 'num mono' }),
      head: el('td', { class: 'num mono' }),
      lag: el('td', { class: 'num col-lag' }),
      trend: el('td', { class: 'col-trend' }),
      gaps: el('td', { class: 'col-gaps' }),
      attempts: el('td', { class: 'num' }),
      error: el('td', { class: 'col-error' }),
      seen: el('td', { class: 'col-seen' }),
      dead: el('td', { class: 'num' }),
      actions: el('td', { class: 'col-actions' }),
    };

    const spark = byId('sparkline-template').content.firstElementChild.cloneNode(true);
    const sparkMax = el('span', { class: 'spark-max' });
    cells.trend.append(spark, sparkMax);

    const errorId = nextId('error');
    const error = {
      preview: el('span', { class: 'error-preview' }),
      toggle: el('button', {
        type: 'button',
        class: 'link-button',
        'aria-expanded': 'false',
        'aria-controls': errorId,
        'data-toggle': 'error',
        text: 'Show full error',
      }),
      full: el('pre', { id: errorId, class: 'error-full', hidden: true }),
      meta: el('span', { class: 'error-meta' }),
      text: undefined,
    };
    error.toggle.addEventListener('click', () => {
      const open = error.toggle.getAttribute('aria-expanded') !== 'true';
      error.toggle.setAttribute('aria-expanded', String(open));
      error.toggle.textContent = open ? 'Hide full error' : 'Show full error';
      error.full.hidden = !open;
      error.preview.hidden = open;
    });
    cells.error.append(error.preview, error.full, error.toggle, error.meta);

    const buttons = {};
    const group = el('div', { class: 'actions', role: 'group', 'aria-label': `Actions for ${label}` });
    const add = (action, text, opensDialog) => {
      const button = el('button', {
        type: 'button',
        'data-action': action,
        'aria-label': `${text} ${label}`,
        'aria-haspopup': opensDialog ? 'dialog' : null,
        class: opensDialog ? 'write' : null,
        text,
      });
      buttons[action] = button;
      group.append(button);
    };
    add('diagnose', 'Diagnose', false);
    add('dead-letters', 'Dead letters', false);
    if (!readOnly) {
      add('restart', 'Restart', true);
      add('disable', 'Disable', true);
      add('enable', 'Enable', true);
      add('skip', 'Skip', true);
      add('replay', 'Replay', true);
      add('fence', 'Fence', true);
    }
    cells.actions.append(group);

    tr.append(nameCell, ...Object.values(cells));
    return { tr, cells, spark, sparkMax, error, buttons };
  }

  /** @param {ReturnType<typeof createRow>} row @param {Record<string, any>} c @param {string} key @param {number} now */
  function updateRow(row, c, key, now) {
    const { cells } = row;
    const badge = el('span', { class: `badge badge-${c.status}`, 'data-status': c.status, text: c.status });
    const statusNotes = [];
    if (c.status === 'disabled') {
      statusNotes.push(c.disabledUntil ? `until ${clockTime(c.disabledUntil)}` : 'until enabled');
      if (c.disabledReason) statusNotes.push(c.disabledReason);
    } else if (c.status !== 'dead' && c.attempts > 0) {
      statusNotes.push(`retrying event ${c.stuckEventId || '?'}`);
    }
    if (c.stuckEventId && c.status === 'dead') statusNotes.push(`stuck on event ${c.stuckEventId}`);
    if (c.rearmCount > 0) statusNotes.push(`re-armed ${plural(c.rearmCount, 'time')}`);
    cells.status.replaceChildren(
      badge,
      ...statusNotes.map((note) => el('span', { class: 'cell-note', text: truncate(note, 120) })),
    );

    cells.cursor.textContent = c.cursor;
    cells.head.textContent = c.head;

    cells.lag.setAttribute('data-lag-events', c.lagEvents);
    cells.lag.replaceChildren(
      el('span', { class: 'lag-events', text: plural(c.lagEvents, 'event') }),
      el('span', {
        class: 'cell-note',
        text:
          c.lagSeconds === null || c.lagSeconds === undefined ? 'at the head' : formatDuration(c.lagSeconds),
      }),
    );

    drawSparkline(row, key, now);

    cells.gaps.setAttribute('data-pending-gaps', String(c.pendingGaps));
    // replaceChildren() would print a null child as the text "null": pass only real nodes.
    cells.gaps.replaceChildren(
      ...[
        c.pendingGaps > 0
          ? el('span', { text: plural(c.pendingGaps, 'range') })
          : el('span', { class: 'muted', text: 'none' }),
        c.pendingGaps > 0 && c.oldestGapAgeSeconds !== null && c.oldestGapAgeSeconds !== undefined
          ? el('span', { class: 'cell-note', text: `oldest ${formatDuration(c.oldestGapAgeSeconds)}` })
          : null,
      ].filter((node) => node !== null),
    );

    cells.attempts.textContent = String(c.attempts);
    updateError(row.error, c);

    if (c.instanceId === '*') {
      cells.seen.replaceChildren(el('span', { class: 'muted', text: 'shared cursor' }));
    } else {
      cells.seen.replaceChildren(timeAgo(c.lastSeenAt));
    }

    cells.dead.setAttribute('data-dead-letters', String(c.deadLetters ?? 0));
    cells.dead.textContent = String(c.deadLetters ?? 0);

    const { buttons } = row;
    if (buttons.skip) {
      buttons.skip.disabled = !c.stuckEventId;
      buttons.skip.title = c.stuckEventId ? `Skip event ${c.stuckEventId}` : 'Not stuck on an event';
    }
    if (buttons.replay) buttons.replay.disabled = !(c.deadLetters > 0);
    if (buttons.fence) buttons.fence.disabled = !(c.pendingGaps > 0);
  }

  /** @param {ReturnType<typeof createRow>['error']} error @param {Record<string, any>} c */
  function updateError(error, c) {
    const text = c.lastError
      ? `${c.failureCategory && c.failureCategory !== 'handler' ? `[${c.failureCategory}] ` : ''}${c.lastError}`
      : null;
    if (text !== error.text) {
      error.text = text;
      const long = text !== null && text.length > ERROR_PREVIEW_CHARS;
      const open = error.toggle.getAttribute('aria-expanded') === 'true';
      error.preview.textContent = text === null ? 'none' : truncate(text, ERROR_PREVIEW_CHARS);
      error.preview.classList.toggle('muted', text === null);
      error.full.textContent = text || '';
      error.toggle.hidden = !long;
      error.full.hidden = !(long && open);
      error.preview.hidden = long && open;
    }
    error.meta.replaceChildren(c.lastError && c.lastErrorAt ? timeAgo(c.lastErrorAt) : '');
  }

  /** @param {ReturnType<typeof createRow>} row @param {string} key @param {number} now */
  function drawSparkline(row, key, now) {
    const samples = state.history.get(key) || [];
    const { width, height, pad } = SPARK;
    let max = 1;
    for (const sample of samples) max = Math.max(max, sample.v);
    const x = (t) => (pad + ((t - (now - HISTORY_MS)) / HISTORY_MS) * (width - 2 * pad)).toFixed(1);
    const y = (v) => (height - pad - (v / max) * (height - 2 * pad)).toFixed(1);
    const points = samples.map((s) => `${x(s.t)},${y(s.v)}`).join(' ');
    row.spark.querySelector('polyline').setAttribute('points', points);
    const dot = row.spark.querySelector('circle');
    const last = samples[samples.length - 1];
    if (last) {
      dot.setAttribute('cx', x(last.t));
      dot.setAttribute('cy', y(last.v));
    }
    const peak = samples.reduce((m, s) => Math.max(m, s.v), 0);
    const label = last
      ? `Lag over the last 5 minutes: now ${plural(last.v, 'event')}, highest ${plural(peak, 'event')} ` +
        `(${plural(samples.length, 'sample')})`
      : 'No lag samples yet';
    row.spark.setAttribute('aria-label', label);
    row.spark.querySelector('title').textContent = label;
    row.sparkMax.textContent = `max ${peak}`;
  }

  // ---------------------------------------------------------------------------------------------
  // The confirmation dialog

  const dialog = byId('action-dialog');
  const dialogForm = byId('dialog-form');
  const confirmButton = byId('dialog-confirm');

  /** @param {string | null} message */
  function setDialogError(message) {
    const node = byId('dialog-error');
    node.textContent = message || '';
    node.hidden = !message;
  }

  /**
   * Opens the confirmation dialog. `onConfirm(reasonFields)` resolves to the success message;
   * `prepare()` may run first (a dry run) and calls `ready(description, enabled)`.
   */
  function openDialog({
    title,
    description,
    fields = [],
    confirmLabel,
    danger = false,
    opener,
    onConfirm,
    prepare,
  }) {
    byId('dialog-title').textContent = title;
    byId('dialog-description').textContent = description;
    byId('dialog-fields').replaceChildren(...fields);
    byId('dialog-reason').value = '';
    setDialogError(null);
    confirmButton.textContent = confirmLabel;
    confirmButton.classList.toggle('danger', danger);
    confirmButton.disabled = Boolean(prepare);
    const context = { onConfirm, opener, busy: false, ready: !prepare, failure: `${title} failed` };
    state.dialog = context;
    state.dialogOpen = true;
    clearTimeout(state.timer);
    updateRefreshStatus();
    dialog.showModal();
    const first = byId('dialog-fields').querySelector('input:not([disabled])');
    (first || byId('dialog-cancel')).focus();
    if (prepare) {
      prepare((text, enabled) => {
        if (state.dialog !== context) return;
        byId('dialog-description').textContent = text;
        context.ready = enabled;
        confirmButton.disabled = !enabled;
      });
    }
  }

  dialog.addEventListener('close', () => {
    const context = state.dialog;
    state.dialog = null;
    state.dialogOpen = false;
    restoreFocus(context && context.opener);
    void poll();
  });

  /** Back to the button that opened a dialog or panel, else its nearest usable neighbour. */
  function restoreFocus(opener) {
    if (opener && opener.isConnected && !opener.disabled) {
      opener.focus();
      return;
    }
    const group = opener && opener.isConnected ? opener.closest('.actions') : null;
    const neighbour = group ? group.querySelector('button:not([disabled])') : null;
    if (neighbour) neighbour.focus();
    else if (state.detail) byId('detail-title').focus();
    else byId('main').focus();
  }

  byId('dialog-cancel').addEventListener('click', () => dialog.close());

  dialogForm.addEventListener('submit', (event) => {
    event.preventDefault();
    const context = state.dialog;
    if (!context || context.busy || !context.ready) return;
    context.busy = true;
    confirmButton.disabled = true;
    confirmButton.setAttribute('aria-busy', 'true');
    setDialogError(null);
    const reason = byId('dialog-reason').value.trim();
    const extra = reason ? { reason } : {};
    Promise.resolve()
      .then(() => context.onConfirm(extra))
      .then(
        (message) => {
          // Closed first: while the modal is open, the page behind it (the result region) is inert.
          if (state.dialog === context) dialog.close();
          showResult(message, 'success');
          refreshDetail();
        },
        (error) => {
          const message = `${context.failure}: ${describeError(error)}`;
          showResult(message, 'error');
          if (state.dialog === context) setDialogError(message);
        },
      )
      .finally(() => {
        context.busy = false;
        confirmButton.removeAttribute('aria-busy');
        if (state.dialog === context) confirmButton.disabled = !context.ready;
      });
  });

  /**
   * An input with its label (or, with a null label, an `aria-label` among the attributes) and hint.
   * @param {Record<string, unknown>} attributes @param {string | null} labelText @param {string} [hint]
   */
  function field(attributes, labelText, hint) {
    const id = attributes.id || nextId('field');
    const hintId = hint ? nextId('hint') : null;
    const input = el('input', {
      type: 'text',
      autocomplete: 'off',
      ...attributes,
      id,
      'aria-describedby': hintId,
    });
    return {
      input,
      node: el(
        'div',
        { class: 'field' },
        labelText === null ? null : el('label', { for: id, text: labelText }),
        input,
        hint ? el('p', { id: hintId, class: 'hint', text: hint }) : null,
      ),
    };
  }

  /**
   * A radio group; `extra` nodes follow the choice they belong to.
   * @param {string} legend @param {string} name
   * @param {Array<{ value: string, label: string, checked?: boolean, extra?: Node }>} choices
   */
  function radioGroup(legend, name, choices) {
    const fieldset = el('fieldset', { class: 'choices' }, el('legend', { text: legend }));
    const inputs = [];
    for (const choice of choices) {
      const id = nextId('choice');
      const input = el('input', {
        type: 'radio',
        name,
        id,
        value: choice.value,
        checked: Boolean(choice.checked),
        required: true,
      });
      inputs.push(input);
      fieldset.append(
        el(
          'div',
          { class: 'choice' },
          input,
          el('label', { for: id, text: choice.label }),
          choice.extra || null,
        ),
      );
    }
    const selected = () => {
      const checked = inputs.find((input) => input.checked);
      return checked ? checked.value : null;
    };
    return { node: fieldset, inputs, selected };
  }

  /** Enables `input` only while the radio `value` is chosen. */
  function linkChoice(group, value, input) {
    const sync = () => {
      input.disabled = group.selected() !== value;
      input.required = !input.disabled;
    };
    for (const radio of group.inputs) radio.addEventListener('change', sync);
    sync();
  }

  /** @param {Record<string, any>} r an action result */
  function movement(r) {
    const parts = [];
    if (r.cursorBefore !== r.cursorAfter) parts.push(`cursor ${r.cursorBefore} → ${r.cursorAfter}`);
    else parts.push(`cursor ${r.cursorAfter}`);
    if (r.statusBefore && r.statusAfter && r.statusBefore !== r.statusAfter) {
      parts.push(`status ${r.statusBefore} → ${r.statusAfter}`);
    } else if (r.statusAfter) parts.push(`status ${r.statusAfter}`);
    return parts.join(', ');
  }

  // ---------------------------------------------------------------------------------------------
  // Operator actions

  const ID_PATTERN = '[1-9][0-9]{0,18}';

  /** @param {Record<string, any>} c @param {HTMLElement} opener */
  function restartAction(c, opener) {
    const label = labelOf(c);
    const idField = field(
      {
        id: 'restart-id',
        inputmode: 'numeric',
        pattern: '[0-9]{1,19}',
        'aria-label': 'Event id to continue after',
      },
      null,
    );
    const group = radioGroup('Restart from', 'restart-from', [
      { value: 'beginning', label: 'The beginning: every event retention kept is delivered again' },
      {
        value: 'now',
        label: `Now: the cursor jumps to the head, ${plural(c.lagEvents, 'pending event')} not delivered`,
      },
      { value: 'id', label: 'After event id (events after it are delivered):', extra: idField.node },
    ]);
    linkChoice(group, 'id', idField.input);
    openDialog({
      title: `Restart ${label}`,
      description:
        `Moves the cursor (now ${c.cursor}, head ${c.head}) and clears attempts, pending gaps and the ` +
        're-arm budget. A dead consumer becomes idle; a disabled one stays disabled.',
      fields: [group.node],
      confirmLabel: 'Restart',
      danger: true,
      opener,
      onConfirm: async (extra) => {
        const choice = group.selected();
        const from = choice === 'id' ? idField.input.value.trim() : choice;
        const r = await api('POST', consumerPath(c, '/restart'), { from, ...instanceBody(c), ...extra });
        return `Restarted ${label} from ${from}: ${movement(r)}.`;
      },
    });
  }

  /** @param {Record<string, any>} c @param {HTMLElement} opener */
  function disableAction(c, opener) {
    const label = labelOf(c);
    const minutes = field(
      {
        id: 'disable-minutes',
        type: 'number',
        min: 1,
        max: 525600,
        step: 1,
        inputmode: 'numeric',
        'aria-label': 'Minutes',
      },
      null,
    );
    const group = radioGroup('Disable for', 'disable-for', [
      { value: '15', label: '15 minutes', checked: true },
      { value: '60', label: '1 hour' },
      { value: 'custom', label: 'Minutes:', extra: minutes.node },
      { value: 'forever', label: 'Until enabled again' },
    ]);
    linkChoice(group, 'custom', minutes.input);
    openDialog({
      title: `Disable ${label}`,
      description:
        'Stops its turns: the cursor waits and nothing is lost. A time-boxed disable ends by itself.',
      fields: [group.node],
      confirmLabel: 'Disable',
      danger: true,
      opener,
      onConfirm: async (extra) => {
        const choice = group.selected();
        const body = { ...instanceBody(c), ...extra };
        let span = 'until enabled again';
        if (choice !== 'forever') {
          const count = choice === 'custom' ? Number(minutes.input.value) : Number(choice);
          body.forMs = Math.round(count * 60000);
          span = `for ${plural(count, 'minute')} (until ${new Date(Date.now() + body.forMs).toLocaleTimeString()})`;
        }
        const r = await api('POST', consumerPath(c, '/disable'), body);
        return `Disabled ${label} ${span}: ${movement(r)}.`;
      },
    });
  }

  /** @param {Record<string, any>} c @param {HTMLElement} opener */
  function enableAction(c, opener) {
    const label = labelOf(c);
    const description =
      c.status === 'dead'
        ? `Re-arms it by hand: the next turn retries event ${c.stuckEventId || '?'} with fresh attempts.`
        : c.status === 'disabled'
          ? 'Resumes its turns from its cursor.'
          : `It is ${c.status}, neither disabled nor dead: enabling changes nothing.`;
    openDialog({
      title: `Enable ${label}`,
      description,
      confirmLabel: 'Enable',
      opener,
      onConfirm: async (extra) => {
        const r = await api('POST', consumerPath(c, '/enable'), { ...instanceBody(c), ...extra });
        return `Enabled ${label}: ${movement(r)}.`;
      },
    });
  }

  /** @param {Record<string, any>} c @param {HTMLElement} opener */
  function skipAction(c, opener) {
    if (!c.stuckEventId) return;
    const label = labelOf(c);
    const eventId = field(
      {
        id: 'skip-event-id',
        inputmode: 'numeric',
        pattern: ID_PATTERN,
        required: true,
        value: c.stuckEventId,
      },
      'Event id',
      'Only the event the consumer is stuck on can be skipped; the server refuses any other.',
    );
    openDialog({
      title: `Skip an event of ${label}`,
      description:
        `Event ${c.stuckEventId} is copied to the dead letters and the next turn passes it without calling ` +
        `the handler${c.lastError ? ` (last error: ${truncate(c.lastError, 160)})` : ''}.`,
      fields: [eventId.node],
      confirmLabel: 'Skip event',
      danger: true,
      opener,
      onConfirm: async (extra) => {
        const id = eventId.input.value.trim();
        const r = await api('POST', consumerPath(c, '/skip'), { eventId: id, ...instanceBody(c), ...extra });
        return `Skipped event ${r.eventId || id} of ${label}; it is in the dead letters (${movement(r)}).`;
      },
    });
  }

  /**
   * Counts first (a dry run), then asks for exactly the counted dead letters to be replayed.
   * @param {Record<string, any>} c @param {HTMLElement} opener @param {string[]} [ids]
   */
  function replayAction(c, opener, ids) {
    const label = labelOf(c);
    let counted = [];
    const selection = ids ? { ids } : {};
    openDialog({
      title: ids ? `Replay dead letter ${ids.join(', ')} of ${label}` : `Replay dead letters of ${label}`,
      description: 'Counting the dead letters to replay…',
      confirmLabel: 'Replay',
      opener,
      prepare: (ready) => {
        api('POST', consumerPath(c, '/dead-letters/replay'), {
          ...selection,
          dryRun: true,
          ...instanceBody(c),
        }).then(
          (r) => {
            counted = r.deadLetterIds || [];
            if (r.count === 0) {
              ready('Nothing to replay: no dead letter is waiting for a replay.', false);
              return;
            }
            const capped =
              !ids && r.count >= DEAD_LETTER_LIMIT
                ? ` (the oldest ${DEAD_LETTER_LIMIT}; replay again for more)`
                : '';
            ready(
              `${plural(r.count, 'dead letter')}${capped} will be delivered again through the handler on the ` +
                `consumer's next turn: ids ${truncate(counted.join(', '), 300)}.`,
              true,
            );
          },
          (error) => {
            ready('The dry run failed: nothing can be replayed from here.', false);
            setDialogError(`Counting failed: ${describeError(error)}`);
          },
        );
      },
      onConfirm: async (extra) => {
        const r = await api('POST', consumerPath(c, '/dead-letters/replay'), {
          ids: counted,
          ...instanceBody(c),
          ...extra,
        });
        return (
          `Replay requested for ${plural(r.count, 'dead letter')} of ${label} ` +
          `(ids ${truncate((r.deadLetterIds || []).join(', '), 200)}): delivered on its next turn.`
        );
      },
    });
  }

  /** @param {Record<string, any>} c @param {HTMLElement} opener */
  function fenceAction(c, opener) {
    const label = labelOf(c);
    const gapId = field(
      { id: 'fence-event-id', inputmode: 'numeric', pattern: ID_PATTERN, required: true },
      'Gap id',
      'Loading the pending gaps…',
    );
    const hint = gapId.node.querySelector('.hint');
    openDialog({
      title: `Fence a gap of ${label}`,
      description:
        'Gives up one pending gap id for good: a tombstone takes the id, so a late writer fails on the key ' +
        'instead of its event being skipped silently. Refused while a transaction still owns the id.',
      fields: [gapId.node],
      confirmLabel: 'Fence gap id',
      danger: true,
      opener,
      onConfirm: async (extra) => {
        const id = gapId.input.value.trim();
        const r = await api('POST', consumerPath(c, '/fence'), { eventId: id, ...instanceBody(c), ...extra });
        return `Fenced gap id ${r.eventId || id} of ${label}: a tombstone now holds it (${movement(r)}).`;
      },
    });
    api('GET', consumerPath(c, queryOf(c))).then(
      (detail) => {
        const gaps = (detail && detail.gaps) || [];
        if (gaps.length === 0) {
          hint.textContent = 'No pending gap right now.';
          return;
        }
        hint.textContent = `Pending gaps: ${truncate(
          gaps.map((g) => (g.from === g.to ? g.from : `${g.from}–${g.to}`)).join(', '),
          200,
        )}.`;
        if (!gapId.input.value) gapId.input.value = gaps[0].from;
      },
      (error) => {
        hint.textContent = `The pending gaps could not be loaded: ${describeError(error)}.`;
      },
    );
  }

  // ---------------------------------------------------------------------------------------------
  // The detail panel: diagnosis and dead letters

  const detailSection = byId('detail');

  /** @param {'diagnose' | 'dead-letters'} kind @param {Record<string, any>} c @param {HTMLElement} opener */
  function openDetail(kind, c, opener) {
    state.detail = { kind, key: keyOf(c), consumer: c, opener };
    detailSection.setAttribute('data-detail', kind);
    detailSection.setAttribute('data-consumer', c.name);
    detailSection.setAttribute('data-instance', c.instanceId);
    byId('detail-title').textContent =
      kind === 'diagnose' ? `Diagnosis of ${labelOf(c)}` : `Dead letters of ${labelOf(c)}`;
    detailSection.hidden = false;
    byId('detail-title').focus();
    refreshDetail();
  }

  function closeDetail() {
    const detail = state.detail;
    state.detail = null;
    detailSection.hidden = true;
    byId('detail-body').replaceChildren();
    restoreFocus(detail && detail.opener);
  }

  function refreshDetail() {
    const detail = state.detail;
    if (!detail) return;
    const c = state.consumers.get(detail.key) || detail.consumer;
    const body = byId('detail-body');
    body.setAttribute('aria-busy', 'true');
    const load =
      detail.kind === 'diagnose'
        ? api('GET', consumerPath(c, `/diagnose${queryOf(c)}`)).then((d) => renderDiagnosis(d))
        : api(
            'GET',
            consumerPath(c, `/dead-letters${queryOf(c, { limit: String(DEAD_LETTER_LIMIT) })}`),
          ).then((letters) => renderDeadLetters(c, Array.isArray(letters) ? letters : []));
    load.then(
      (nodes) => {
        if (state.detail !== detail) return;
        // Re-rendering removes a focused button (a replay just confirmed): focus the panel's title.
        const hadFocus = body.contains(document.activeElement);
        body.replaceChildren(...nodes);
        body.removeAttribute('aria-busy');
        if (hadFocus && !state.dialogOpen) byId('detail-title').focus();
      },
      (error) => {
        if (state.detail !== detail) return;
        body.replaceChildren(el('p', { class: 'detail-error', role: 'alert', text: describeError(error) }));
        body.removeAttribute('aria-busy');
      },
    );
  }

  /** @param {Record<string, any> | null} b a backend */
  function describeBackend(b) {
    if (!b) return '—';
    if (b.preparedGid)
      return `prepared transaction "${b.preparedGid}" (xid ${b.xid || '?'}, database ${b.database || '?'})`;
    const parts = [`pid ${b.pid ?? '?'}`];
    if (b.applicationName) parts.push(`application "${b.applicationName}"`);
    if (b.database) parts.push(`database ${b.database}`);
    if (b.state) parts.push(`state ${b.state}`);
    if (b.xactStart) parts.push(`transaction started ${formatDuration(secondsSince(b.xactStart))} ago`);
    return parts.join(', ');
  }

  /** @param {Array<[string, Node | string]>} pairs */
  function definitionList(pairs) {
    const dl = el('dl', { class: 'facts' });
    for (const [term, value] of pairs) dl.append(el('dt', { text: term }), el('dd', {}, value));
    return dl;
  }

  /** @param {string} caption @param {string[]} headings @param {Array<Array<Node | string>>} rows */
  function simpleTable(caption, headings, rows) {
    return el(
      'div',
      { class: 'table-wrap', role: 'region', 'aria-label': caption, tabindex: 0 },
      el(
        'table',
        {},
        el('caption', { class: 'visually-hidden', text: caption }),
        el('thead', {}, el('tr', {}, ...headings.map((h) => el('th', { scope: 'col', text: h })))),
        el(
          'tbody',
          {},
          ...rows.map((cells) =>
            el(
              'tr',
              {},
              ...cells.map((cell, i) => el(i === 0 ? 'th' : 'td', i === 0 ? { scope: 'row' } : {}, cell)),
            ),
          ),
        ),
      ),
    );
  }

  /** @param {Record<string, any>} d the diagnosis */
  function renderDiagnosis(d) {
    const c = d.consumer || {};
    const nodes = [
      el(
        'p',
        { class: 'detail-summary' },
        el('span', { class: `badge badge-${c.status}`, 'data-status': c.status, text: c.status }),
        ` cursor ${c.cursor} of head ${c.head}, ${plural(c.lagEvents, 'event')} behind`,
      ),
      el('h3', { text: 'Findings' }),
    ];
    const findings = Array.isArray(d.findings) ? d.findings : [];
    nodes.push(
      findings.length
        ? el('ul', { class: 'findings' }, ...findings.map((f) => el('li', { text: f })))
        : el('p', { class: 'muted', text: 'No finding.' }),
    );

    nodes.push(el('h3', { text: 'Oldest pending gap' }));
    const gap = d.oldestGap;
    if (!gap) {
      nodes.push(el('p', { class: 'muted', text: 'No pending gap.' }));
    } else {
      nodes.push(
        definitionList([
          ['Ids', gap.from === gap.to ? gap.from : `${gap.from}–${gap.to}`],
          ['Pending for', formatDuration(gap.ageSeconds)],
          ['Observed', clockTime(gap.observedAt)],
          ['Fence', gap.fence ? `${gap.fence} (transactions older than it keep the gap open)` : 'none'],
        ]),
      );
      const holders = Array.isArray(gap.heldBy) ? gap.heldBy : [];
      nodes.push(el('h4', { text: 'Held open by' }));
      nodes.push(
        holders.length
          ? simpleTable(
              'Transactions holding the oldest gap open',
              ['PID', 'Application', 'Database', 'State', 'Transaction start', 'Xid', 'Prepared gid'],
              holders.map((h) => [
                String(h.pid ?? '—'),
                h.applicationName || '—',
                h.database || '—',
                h.state || '—',
                h.xactStart ? timeAgo(h.xactStart) : '—',
                h.xid || '—',
                h.preparedGid || '—',
              ]),
            )
          : el('p', { class: 'muted', text: 'No running transaction holds it open.' }),
      );
    }

    nodes.push(el('h3', { text: 'Row lock' }));
    nodes.push(
      el('p', {
        text: d.rowLockedBy
          ? `Held by ${describeBackend(d.rowLockedBy)}: a turn is running.`
          : 'Not locked: no turn is running for this consumer.',
      }),
    );

    nodes.push(el('h3', { text: 'Next automatic re-arm' }));
    nodes.push(el('p', { text: d.nextRearmAt ? clockTime(d.nextRearmAt) : 'None scheduled.' }));
    return nodes;
  }

  /** @param {Record<string, any>} c @param {Array<Record<string, any>>} letters */
  function renderDeadLetters(c, letters) {
    const nodes = [];
    const pending = letters.filter((l) => !l.replayedAt && !l.replayRequestedAt).length;
    nodes.push(
      el('p', {
        class: 'detail-summary',
        text:
          letters.length === 0
            ? 'No dead letter.'
            : `${plural(letters.length, 'dead letter')} shown (newest first, at most ${DEAD_LETTER_LIMIT}); ` +
              `${pending} not replayed.`,
      }),
    );
    if (!readOnly && letters.length > 0) {
      nodes.push(
        el(
          'p',
          {},
          el('button', {
            type: 'button',
            'data-action': 'replay',
            'aria-haspopup': 'dialog',
            'aria-label': `Replay the pending dead letters of ${labelOf(c)}`,
            text: 'Replay the pending dead letters',
            disabled: pending === 0,
          }),
        ),
      );
    }
    if (letters.length === 0) return nodes;
    const rows = letters.map((letter) => {
      const error = letter.error || '';
      const replay = letter.replayedAt
        ? el('span', {}, 'replayed ', timeAgo(letter.replayedAt))
        : letter.replayRequestedAt
          ? el('span', {}, 'requested ', timeAgo(letter.replayRequestedAt))
          : el('span', { class: 'muted', text: 'no' });
      const payload = el(
        'details',
        {},
        el('summary', { text: 'Payload' }),
        el('pre', {
          class: 'payload',
          text: JSON.stringify(
            { streamId: letter.streamId, data: letter.data, metadata: letter.metadata },
            null,
            2,
          ),
        }),
      );
      const errorNode =
        error.length > ERROR_PREVIEW_CHARS
          ? el(
              'details',
              {},
              el('summary', { text: truncate(error, ERROR_PREVIEW_CHARS) }),
              el('pre', { class: 'error-full', text: error }),
            )
          : el('span', { class: error ? '' : 'muted', text: error || 'none' });
      const button = readOnly
        ? el('span', { class: 'muted', text: '—' })
        : el('button', {
            type: 'button',
            'data-action': 'replay',
            'data-dead-letter-id': letter.id,
            'aria-haspopup': 'dialog',
            'aria-label': `Replay dead letter ${letter.id} (event ${letter.eventId})`,
            text: 'Replay',
          });
      return [
        String(letter.id),
        el('span', { class: 'mono', text: letter.eventId }),
        el('span', {}, letter.type, el('span', { class: 'cell-note', text: letter.reason })),
        errorNode,
        String(letter.attempts ?? '—'),
        timeAgo(letter.createdAt),
        replay,
        el('span', {}, payload, button),
      ];
    });
    const table = simpleTable(
      `Dead letters of ${labelOf(c)}`,
      ['Id', 'Event', 'Type', 'Error', 'Attempts', 'Created', 'Replayed', 'Actions'],
      rows,
    );
    table.querySelectorAll('tbody tr').forEach((tr, i) => tr.setAttribute('data-dead-letter', letters[i].id));
    nodes.push(table);
    return nodes;
  }

  // ---------------------------------------------------------------------------------------------
  // Wiring

  /** @param {HTMLElement} button @param {Record<string, any>} c */
  function runAction(button, c) {
    const action = button.getAttribute('data-action');
    switch (action) {
      case 'diagnose':
        return openDetail('diagnose', c, button);
      case 'dead-letters':
        return openDetail('dead-letters', c, button);
      case 'restart':
        return restartAction(c, button);
      case 'disable':
        return disableAction(c, button);
      case 'enable':
        return enableAction(c, button);
      case 'skip':
        return skipAction(c, button);
      case 'replay': {
        const id = button.getAttribute('data-dead-letter-id');
        return replayAction(c, button, id ? [id] : undefined);
      }
      case 'fence':
        return fenceAction(c, button);
      default:
        return undefined;
    }
  }

  byId('consumer-rows').addEventListener('click', (event) => {
    const button = event.target instanceof Element ? event.target.closest('button[data-action]') : null;
    if (!button || button.disabled) return;
    const tr = button.closest('tr[data-consumer]');
    const key =
      tr && keyOf({ name: tr.getAttribute('data-consumer'), instanceId: tr.getAttribute('data-instance') });
    const c = key && state.consumers.get(key);
    if (c) runAction(button, c);
  });

  byId('detail-body').addEventListener('click', (event) => {
    const button = event.target instanceof Element ? event.target.closest('button[data-action]') : null;
    if (!button || button.disabled || !state.detail) return;
    runAction(button, state.consumers.get(state.detail.key) || state.detail.consumer);
  });

  byId('detail-close').addEventListener('click', closeDetail);
  byId('detail-refresh').addEventListener('click', refreshDetail);
  detailSection.addEventListener('keydown', (event) => {
    if (event.key === 'Escape' && !state.dialogOpen) closeDetail();
  });

  const pauseButton = byId('refresh-toggle');
  pauseButton.addEventListener('click', () => {
    state.paused = !state.paused;
    pauseButton.setAttribute('aria-pressed', String(state.paused));
    if (state.paused) clearTimeout(state.timer);
    else void poll();
    updateRefreshStatus();
  });
  byId('refresh-now').addEventListener('click', () => void poll());

  function showTokenStatus() {
    byId('token-status').textContent = readToken()
      ? 'A bearer token is set for this tab.'
      : "No token: the browser's own credentials are used.";
  }
  byId('token-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const input = byId('token-input');
    writeToken(input.value.trim());
    input.value = '';
    showTokenStatus();
    void poll();
  });
  byId('token-clear').addEventListener('click', () => {
    writeToken('');
    byId('token-input').value = '';
    showTokenStatus();
    void poll();
  });

  document.addEventListener('visibilitychange', () => {
    if (!document.hidden) void poll();
  });

  byId('read-only-note').hidden = !readOnly;
  showTokenStatus();
  void poll();
})();

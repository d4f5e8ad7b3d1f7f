// @ts-check
// The consumers table and the summary above it. Rows are kept between polls and updated in place,
// so keyboard focus and an expanded error survive a refresh.
import { byId, el, nextId, present } from './dom.js';
import { clockTime, formatDuration, keyOf, labelOf, plural, timeAgo, truncate } from './format.js';
import { trendCell } from './charts.js';
import {
  actionLabel,
  applicableActions,
  errorState,
  isRetrying,
  isStuck,
  laneChangeNote,
  laneLabel,
  parkedKeyCount,
  totalParkedKeys,
  WRITE_ACTIONS,
} from './policy.js';
import { readOnly, state } from './state.js';

/** @typedef {import('./types.js').ConsumerSummary} ConsumerSummary */

const ERROR_PREVIEW_CHARS = 90;
const COLUMNS = 9;

/**
 * @typedef {object} Row
 * @property {HTMLTableRowElement} tr
 * @property {Record<string, HTMLElement>} cells
 * @property {{ preview: HTMLElement, full: HTMLElement, toggle: HTMLButtonElement, meta: HTMLElement, state: HTMLElement, text: string | null | undefined }} error
 * @property {{ badge: HTMLElement, notes: HTMLElement, stuck: HTMLElement, view: HTMLButtonElement }} status
 * @property {Record<string, HTMLButtonElement>} buttons
 * @property {HTMLButtonElement} trendButton
 */

/** key → the row's elements @type {Map<string, Row>} */
const rows = new Map();

/** @param {string | null} text */
export function setPlaceholder(text) {
  const body = byId('consumer-rows', HTMLElement);
  const existing = body.querySelector('tr.placeholder');
  if (text === null) {
    existing?.remove();
    return;
  }
  const cell = existing?.firstElementChild;
  if (cell) cell.textContent = text;
  else
    body.append(
      el('tr', { class: 'placeholder', role: 'row' }, el('td', { colspan: COLUMNS, role: 'cell', text })),
    );
}

/** Whether the table shows any consumer row. */
export function hasRows() {
  return rows.size > 0;
}

/**
 * A cell with the label that names it where the table is shown as cards (narrow screens).
 * @param {string} label @param {string} className
 */
function cell(label, className) {
  return el('td', { class: className, role: 'cell', 'data-label': label });
}

/** @param {ConsumerSummary} c @returns {Row} */
function createRow(c) {
  const label = labelOf(c);
  const tr = el('tr', { role: 'row', 'data-consumer': c.name, 'data-instance': c.instanceId });
  const nameCell = el(
    'th',
    { scope: 'row', role: 'rowheader', class: 'col-name' },
    el('span', { class: 'consumer-name', text: c.name }),
  );
  const cells = {
    name: nameCell,
    status: cell('Status', 'col-status'),
    position: cell('Cursor / head', 'num col-position'),
    lag: cell('Lag', 'num col-lag'),
    trend: cell('Lag and throughput', 'col-trend'),
    gaps: cell('Pending gaps', 'col-gaps'),
    error: cell('Last error', 'col-error'),
    dead: cell('Dead letters', 'num col-dead'),
    actions: cell('Actions', 'col-actions'),
  };

  const view = el('button', {
    type: 'button',
    class: 'link-button',
    'data-action': 'view-event',
    'aria-haspopup': 'dialog',
  });
  const status = {
    badge: el('span', { class: 'badge' }),
    notes: el('span', { class: 'status-notes' }),
    stuck: el('span', { class: 'cell-note', hidden: true }, 'stuck on ', view),
    view,
  };
  cells.status.append(status.badge, status.notes, status.stuck);

  const trendButton = el('button', {
    type: 'button',
    class: 'trend-button',
    'data-action': 'trends',
    'aria-label': `Lag and throughput charts of ${label}`,
  });
  cells.trend.append(trendButton);

  const errorId = nextId('error');
  const error = {
    state: el('span', { class: 'error-state' }),
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
    /** What the cell shows; undefined until the first poll fills it. @type {string | null | undefined} */
    text: undefined,
  };
  error.toggle.addEventListener('click', () => {
    const open = error.toggle.getAttribute('aria-expanded') !== 'true';
    error.toggle.setAttribute('aria-expanded', String(open));
    error.toggle.textContent = open ? 'Hide full error' : 'Show full error';
    error.full.hidden = !open;
    error.preview.hidden = open;
  });
  cells.error.append(error.state, error.preview, error.full, error.toggle, error.meta);

  /** @type {Record<string, HTMLButtonElement>} */
  const buttons = {};
  const group = el('div', { class: 'actions', role: 'group', 'aria-label': `Actions for ${label}` });
  /** @param {string} action @param {string} text @param {boolean} write */
  const add = (action, text, write) => {
    const button = el('button', {
      type: 'button',
      'data-action': action,
      'aria-label': `${text} ${label}`,
      'aria-haspopup': write ? 'dialog' : null,
      class: write ? 'write' : null,
      text,
    });
    buttons[action] = button;
    group.append(button);
  };
  add('diagnose', 'Diagnose', false);
  add('dead-letters', 'Dead letters', false);
  add('parked-keys', 'Parked keys', false);
  if (!readOnly) for (const action of WRITE_ACTIONS) add(action, actionLabel(action, c), true);
  cells.actions.append(group);

  tr.append(...Object.values(cells));
  return { tr, cells, status, error, buttons, trendButton };
}

/** @param {Row} row @param {ConsumerSummary} c @param {string} key @param {number} now */
function updateRow(row, c, key, now) {
  const { cells } = row;
  const label = labelOf(c);

  // A lane row (instance `*k/N`) is named as the lane it is; its instance id is in the title.
  const lane = laneLabel(c);
  const instance =
    c.instanceId === '*'
      ? null
      : lane
        ? el('span', { class: 'cell-note', 'data-lane': lane, title: `instance ${c.instanceId}`, text: lane })
        : el('span', { class: 'cell-note' }, `instance ${c.instanceId} · seen `, timeAgo(c.lastSeenAt));
  cells['name']?.replaceChildren(
    ...present([el('span', { class: 'consumer-name', text: c.name }), instance]),
  );

  const { status } = row;
  status.badge.className = `badge badge-${c.status}`;
  status.badge.setAttribute('data-status', c.status);
  status.badge.textContent = c.status;
  /** @type {Node[]} */
  const notes = [];
  const note = (/** @type {string} */ text) =>
    notes.push(el('span', { class: 'cell-note', text: truncate(text, 120) }));
  if (c.status === 'disabled') {
    note(c.disabledUntil ? `until ${clockTime(c.disabledUntil)}` : 'until enabled');
    if (c.disabledReason) note(c.disabledReason);
  } else if (isRetrying(c)) {
    note(`retrying, ${plural(c.attempts, 'failed attempt')}`);
  }
  if ((c.rearmCount ?? 0) > 0) note(`re-armed ${plural(c.rearmCount ?? 0, 'time')}`);
  // The consumer's whole: every lane row of it says the same.
  const parked = parkedKeyCount(c);
  if (parked > 0) note(`${plural(parked, 'parked key')}`);
  const change = laneChangeNote(c);
  if (change) note(change);
  status.notes.replaceChildren(...notes);
  row.tr.setAttribute('data-parked-keys', String(parked));
  if (c.laneChange) row.tr.setAttribute('data-lane-change', `${c.laneChange.from}-${c.laneChange.to}`);
  else row.tr.removeAttribute('data-lane-change');
  // The button stays the same element between polls: focus returns to it from the payload dialog.
  const stuck = isStuck(c) && c.stuckEventId ? c.stuckEventId : null;
  status.stuck.hidden = stuck === null;
  if (stuck !== null) {
    status.view.setAttribute('data-event-id', stuck);
    status.view.setAttribute('aria-label', `Open event ${stuck}, the event ${label} is stuck on`);
    status.view.textContent = `event ${stuck}`;
  }

  cells['position']?.replaceChildren(
    el('span', { class: 'mono', text: c.cursor }),
    el('span', { class: 'cell-note' }, 'of ', el('span', { class: 'mono', text: c.head })),
  );

  const lag = cells['lag'];
  if (lag) {
    lag.setAttribute('data-lag-events', c.lagEvents);
    lag.replaceChildren(
      el('span', { class: 'lag-events', text: plural(c.lagEvents, 'event') }),
      el('span', {
        class: 'cell-note',
        text:
          c.lagSeconds === null || c.lagSeconds === undefined
            ? 'at the head'
            : `oldest ${formatDuration(c.lagSeconds)}`,
      }),
    );
  }

  row.trendButton.replaceChildren(trendCell(state.history.samples(key), now));

  const gaps = cells['gaps'];
  if (gaps) {
    gaps.setAttribute('data-pending-gaps', String(c.pendingGaps));
    gaps.replaceChildren(
      ...present([
        c.pendingGaps > 0
          ? el('span', { text: plural(c.pendingGaps, 'range') })
          : el('span', { class: 'muted', text: 'none' }),
        c.pendingGaps > 0 && c.oldestGapAgeSeconds !== null && c.oldestGapAgeSeconds !== undefined
          ? el('span', { class: 'cell-note', text: `oldest ${formatDuration(c.oldestGapAgeSeconds)}` })
          : null,
      ]),
    );
  }

  updateError(row, c);

  const dead = cells['dead'];
  if (dead) {
    dead.setAttribute('data-dead-letters', String(c.deadLetters ?? 0));
    dead.textContent = String(c.deadLetters ?? 0);
  }

  // Only the actions that apply are offered; hidden buttons keep their place for the next poll.
  const applicable = new Set(applicableActions(c));
  for (const action of WRITE_ACTIONS) {
    const button = row.buttons[action];
    if (!button) continue;
    button.hidden = !applicable.has(action);
    const text = actionLabel(action, c);
    if (button.textContent !== text) {
      button.textContent = text;
      button.setAttribute('aria-label', `${text} ${label}`);
    }
  }
  const skip = row.buttons['skip'];
  if (skip && c.stuckEventId) skip.title = `Skip event ${c.stuckEventId}`;
  const parkedButton = row.buttons['parked-keys'];
  if (parkedButton) {
    parkedButton.hidden = parked === 0;
    parkedButton.setAttribute('aria-label', `Parked keys of ${c.name} (${parked})`);
  }
}

/** @param {Row} row @param {ConsumerSummary} c */
function updateError(row, c) {
  const { error } = row;
  const kind = errorState(c);
  row.cells['error']?.setAttribute('data-error-state', kind);
  const text = c.lastError
    ? `${c.failureCategory && c.failureCategory !== 'handler' ? `[${c.failureCategory}] ` : ''}${c.lastError}`
    : null;
  if (text !== error.text) {
    error.text = text;
    const long = text !== null && text.length > ERROR_PREVIEW_CHARS;
    const open = error.toggle.getAttribute('aria-expanded') === 'true';
    error.preview.textContent = text === null ? 'none' : truncate(text, ERROR_PREVIEW_CHARS);
    error.full.textContent = text ?? '';
    error.toggle.hidden = !long;
    error.full.hidden = !(long && open);
    error.preview.hidden = long && open;
  }
  error.preview.classList.toggle('muted', kind !== 'current');
  error.preview.classList.toggle('error-text', kind === 'current');
  if (kind === 'resolved') {
    // An operator's skip or enable is the moment it was resolved; a consumer that recovered by
    // itself leaves only its latest advance (docs/operating.md, "Dashboard").
    error.state.className = 'error-state tag tag-resolved';
    error.state.textContent = 'Resolved';
    const failed = c.lastErrorAt ? el('span', {}, 'failed ', timeAgo(c.lastErrorAt)) : null;
    const resolved = c.lastErrorResolvedBy
      ? el('span', {}, `resolved: ${c.lastErrorResolvedBy} `, timeAgo(c.lastErrorResolvedAt))
      : el('span', {}, 'advancing again, last ', timeAgo(c.lastErrorResolvedAt));
    error.meta.replaceChildren(...present([failed, failed ? ' · ' : null, resolved]));
  } else if (kind === 'current') {
    error.state.className = 'error-state';
    error.state.replaceChildren();
    error.meta.replaceChildren(...present([c.lastErrorAt ? timeAgo(c.lastErrorAt) : null]));
  } else {
    error.state.className = 'error-state';
    error.state.replaceChildren();
    error.meta.replaceChildren();
  }
}

/**
 * Shows a poll's consumers: new rows are added, gone ones removed, the rest updated in the
 * server's order.
 * @param {ConsumerSummary[]} consumers @param {number} now
 */
export function renderConsumers(consumers, now) {
  const body = byId('consumer-rows', HTMLElement);
  const seen = new Set();
  if (consumers.length > 0) setPlaceholder(null);
  /** @type {Row | null} */
  let previous = null;
  for (const c of consumers) {
    const key = keyOf(c);
    seen.add(key);
    let row = rows.get(key);
    if (!row) {
      row = createRow(c);
      rows.set(key, row);
    }
    updateRow(row, c, key, now);
    // Keep the server's order, moving a row only when needed (moving drops keyboard focus).
    const wanted = previous ? previous.tr.nextElementSibling : body.firstElementChild;
    if (wanted !== row.tr) body.insertBefore(row.tr, wanted);
    previous = row;
  }
  for (const [key, row] of rows) {
    if (seen.has(key)) continue;
    row.tr.remove();
    rows.delete(key);
  }
  if (consumers.length === 0) setPlaceholder('No consumer is registered.');
  renderSummary(consumers);
}

/**
 * The figures above the table: how many consumers, and how many need a look.
 * @param {ConsumerSummary[]} consumers
 */
function renderSummary(consumers) {
  const count = (/** @type {(c: ConsumerSummary) => boolean} */ test) => consumers.filter(test).length;
  const tiles = [
    { key: 'consumers', value: consumers.length, label: 'consumers', tone: '' },
    { key: 'dead', value: count((c) => c.status === 'dead'), label: 'dead', tone: 'bad' },
    {
      key: 'retrying',
      value: count(isRetrying),
      label: 'retrying',
      tone: 'warn',
    },
    { key: 'disabled', value: count((c) => c.status === 'disabled'), label: 'disabled', tone: 'warn' },
    { key: 'behind', value: count((c) => c.lagEvents !== '0'), label: 'behind', tone: '' },
    {
      key: 'gaps',
      value: consumers.reduce((sum, c) => sum + c.pendingGaps, 0),
      label: 'gap ranges',
      tone: 'warn',
    },
    {
      key: 'dead-letters',
      value: consumers.reduce((sum, c) => sum + (c.deadLetters ?? 0), 0),
      label: 'dead letters',
      tone: 'warn',
    },
    { key: 'parked-keys', value: totalParkedKeys(consumers), label: 'parked keys', tone: 'warn' },
  ];
  byId('summary', HTMLElement).replaceChildren(
    ...tiles.map((t) =>
      el(
        'li',
        { class: `tile${t.value > 0 && t.tone ? ` tile-${t.tone}` : ''}`, 'data-tile': t.key },
        el('span', { class: 'tile-value', text: t.value }),
        el('span', { class: 'tile-label', text: t.label }),
      ),
    ),
  );
}

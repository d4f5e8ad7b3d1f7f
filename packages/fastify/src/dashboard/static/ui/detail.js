// @ts-check
// The detail panel under the table: a consumer's diagnosis, its dead letters, its parked keys, or
// its lag and throughput charts.
import { api, consumerPath, describeError, queryOf } from './api.js';
import { trendFigure } from './charts.js';
import { restoreFocus } from './dialog.js';
import { byId, el } from './dom.js';
import { visible } from './visible.js';
import {
  clockTime,
  formatDuration,
  keyOf,
  labelOf,
  plural,
  secondsSince,
  timeAgo,
  truncate,
} from './format.js';
import { parkedKeyCount } from './policy.js';
import { DEAD_LETTER_LIMIT, PARKED_LIMIT, readOnly, state } from './state.js';

/** @typedef {import('./types.js').ConsumerSummary} ConsumerSummary */
/** @typedef {import('./state.js').Detail['kind']} DetailKind */

const ERROR_PREVIEW_CHARS = 80;

const TITLES = {
  diagnose: 'Diagnosis of',
  'dead-letters': 'Dead letters of',
  'parked-keys': 'Parked keys of',
  trends: 'Lag and throughput of',
};

/** @param {DetailKind} kind @param {ConsumerSummary} c @param {HTMLElement | null} opener */
export function openDetail(kind, c, opener) {
  const section = byId('detail', HTMLElement);
  state.detail = { kind, key: keyOf(c), consumer: c, opener, parkedKeys: parkedKeyCount(c) };
  section.setAttribute('data-detail', kind);
  section.setAttribute('data-consumer', c.name);
  section.setAttribute('data-instance', c.instanceId);
  // A consumer's parked keys are its whole's, whichever lane row the panel was opened from.
  const subject = kind === 'parked-keys' ? c.name : labelOf(c);
  byId('detail-title', HTMLElement).textContent = visible(`${TITLES[kind]} ${subject}`);
  section.hidden = false;
  byId('detail-title', HTMLElement).focus();
  refreshDetail();
}

export function closeDetail() {
  const detail = state.detail;
  state.detail = null;
  byId('detail', HTMLElement).hidden = true;
  byId('detail-body', HTMLElement).replaceChildren();
  restoreFocus(detail?.opener);
}

/** The consumer of the open panel, as of the last poll. */
export function detailConsumer() {
  const detail = state.detail;
  return detail ? (state.consumers.get(detail.key) ?? detail.consumer) : null;
}

/**
 * After a poll: the charts follow every poll; the parked keys are reloaded when the consumer's
 * count changed (a replayed key delivered and gone, a key parked), not on every poll, which would
 * take the keyboard focus off their buttons every 2 s.
 */
export function afterPoll() {
  const detail = state.detail;
  if (detail?.kind === 'trends') refreshDetail();
  if (detail?.kind !== 'parked-keys') return;
  // Any row of the consumer: the lane it was opened from may be gone after a change of lanes.
  const name = detail.consumer.name;
  const row = [...state.consumers.values()].find((c) => c.name === name);
  if (row && parkedKeyCount(row) !== detail.parkedKeys) refreshDetail();
}

/** Reloads the open panel (after an action, on its Refresh button; charts on every poll). */
export function refreshDetail() {
  const detail = state.detail;
  const c = detailConsumer();
  if (!detail || !c) return;
  const body = byId('detail-body', HTMLElement);
  if (detail.kind === 'trends') {
    body.replaceChildren(...renderTrends(c));
    return;
  }
  body.setAttribute('aria-busy', 'true');
  /** @type {Promise<Node[]>} */
  let load;
  if (detail.kind === 'diagnose') {
    load = api('GET', consumerPath(c, `/diagnose${queryOf(c)}`)).then((d) =>
      renderDiagnosis(/** @type {import('./types.js').Diagnosis} */ (d)),
    );
  } else if (detail.kind === 'parked-keys') {
    const latest = [...state.consumers.values()].find((row) => row.name === c.name) ?? c;
    detail.parkedKeys = parkedKeyCount(latest);
    load = api('GET', consumerPath(c, `/parked-keys?limit=${PARKED_LIMIT}`)).then((keys) =>
      renderParkedKeys(c, Array.isArray(keys) ? /** @type {import('./types.js').ParkedKey[]} */ (keys) : []),
    );
  } else {
    load = api(
      'GET',
      consumerPath(c, `/dead-letters${queryOf(c, { limit: String(DEAD_LETTER_LIMIT) })}`),
    ).then((letters) =>
      renderDeadLetters(
        c,
        Array.isArray(letters) ? /** @type {import('./types.js').DeadLetter[]} */ (letters) : [],
      ),
    );
  }
  load.then(
    (nodes) => {
      if (state.detail !== detail) return;
      // Re-rendering removes a focused button (a replay just confirmed): focus the panel's title.
      const hadFocus = body.contains(document.activeElement);
      body.replaceChildren(...nodes);
      body.removeAttribute('aria-busy');
      if (hadFocus && state.modals === 0) byId('detail-title', HTMLElement).focus();
    },
    (/** @type {unknown} */ error) => {
      if (state.detail !== detail) return;
      body.replaceChildren(el('p', { class: 'detail-error', role: 'alert', text: describeError(error) }));
      body.removeAttribute('aria-busy');
    },
  );
}

/** @param {ConsumerSummary} c */
function renderTrends(c) {
  const samples = state.history.samples(keyOf(c));
  const now = Date.now();
  return [
    el('p', {
      class: 'detail-summary',
      text:
        'Polled every 2 s while this page is open (kept for this tab). Throughput is how many log ' +
        'positions the cursor passed per second between two polls.',
    }),
    el('div', { class: 'charts' }, trendFigure('lag', samples, now), trendFigure('rate', samples, now)),
  ];
}

/** @param {import('./types.js').Backend | null | undefined} b a backend */
function describeBackend(b) {
  if (!b) return '—';
  if (b.preparedGid)
    return `prepared transaction "${b.preparedGid}" (xid ${b.xid ?? '?'}, database ${b.database ?? '?'})`;
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
      { class: 'simple' },
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

/** @param {import('./types.js').Diagnosis} d */
function renderDiagnosis(d) {
  const c = d.consumer;
  /** @type {Node[]} */
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

/** @param {ConsumerSummary} c @param {import('./types.js').DeadLetter[]} letters */
function renderDeadLetters(c, letters) {
  /** @type {Node[]} */
  const nodes = [];
  const pending = letters.filter((l) => !l.replayedAt && !l.replayRequestedAt).length;
  nodes.push(
    el('p', {
      class: 'detail-summary',
      text:
        letters.length === 0
          ? 'No dead letter.'
          : `${plural(letters.length, 'dead letter')} shown (newest first, at most ${DEAD_LETTER_LIMIT}); ` +
            `${pending} not replayed. Open one to read its payload.`,
    }),
  );
  if (!readOnly && pending > 0) {
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
        }),
      ),
    );
  }
  if (letters.length === 0) return nodes;
  const rows = letters.map((letter) => {
    const error = letter.error ?? '';
    const replay = letter.replayedAt
      ? el('span', {}, 'replayed ', timeAgo(letter.replayedAt))
      : letter.replayRequestedAt
        ? el('span', {}, 'requested ', timeAgo(letter.replayRequestedAt))
        : el('span', { class: 'muted', text: 'no' });
    const view = el('button', {
      type: 'button',
      'data-action': 'view-dead-letter',
      'data-dead-letter-id': letter.id,
      'aria-haspopup': 'dialog',
      'aria-label': `Open dead letter ${letter.id} (event ${letter.eventId}): payload and error`,
      text: 'Open',
    });
    const replayButton =
      readOnly || letter.replayRequestedAt || letter.replayedAt
        ? null
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
      el(
        'span',
        {},
        letter.type,
        el('span', {
          class: 'cell-note',
          text: letter.reason === 'operator-skip' ? 'skipped by an operator' : 'skipApplyErrors',
        }),
      ),
      el('span', {
        class: error ? '' : 'muted',
        title: error || null,
        text: error ? truncate(error, ERROR_PREVIEW_CHARS) : 'none',
      }),
      String(letter.attempts ?? '—'),
      timeAgo(letter.createdAt),
      replay,
      el('span', { class: 'actions' }, view, replayButton ?? ''),
    ];
  });
  const table = simpleTable(
    `Dead letters of ${labelOf(c)}`,
    ['Id', 'Event', 'Type', 'Error', 'Attempts', 'Created', 'Replayed', 'Actions'],
    rows,
  );
  table.querySelectorAll('tbody tr').forEach((tr, i) => {
    const letter = letters[i];
    if (letter) tr.setAttribute('data-dead-letter', letter.id);
  });
  nodes.push(table);
  return nodes;
}

/**
 * A consumer's parked keys (docs/design.md §11.4), oldest first: each with the event and the error
 * that parked it, how many of its events wait, and its actions: its events (payloads), Replay and
 * Drop.
 * @param {ConsumerSummary} c @param {import('./types.js').ParkedKey[]} keys
 */
function renderParkedKeys(c, keys) {
  /** @type {Node[]} */
  const nodes = [
    el('p', {
      class: 'detail-summary',
      text:
        keys.length === 0
          ? 'No parked key.'
          : `${plural(keys.length, 'parked key')} (oldest first, at most ${PARKED_LIMIT}). A parked key's ` +
            'events wait, in order, until it is replayed or dropped; the consumer goes on with its other keys.',
    }),
  ];
  if (keys.length === 0) return nodes;
  const rows = keys.map((parked) => {
    const error = parked.error ?? '';
    /** @param {string} action @param {string} text @param {string} label @param {boolean} write */
    const button = (action, text, label, write) =>
      el('button', {
        type: 'button',
        class: write ? 'write' : null,
        'data-action': action,
        'data-key': parked.key,
        'data-events': parked.events,
        'aria-haspopup': 'dialog',
        'aria-label': `${label} ${JSON.stringify(parked.key)} of ${c.name}`,
        text,
      });
    const replayable = !readOnly && !parked.replayRequestedAt;
    return [
      el('span', { class: 'mono', text: parked.key === '' ? '(empty key)' : parked.key }),
      el('span', { class: 'mono', text: parked.firstEventId }),
      el('span', {
        class: error ? '' : 'muted',
        title: error || null,
        text: error ? truncate(error, ERROR_PREVIEW_CHARS) : 'none',
      }),
      String(parked.events),
      el(
        'span',
        {},
        timeAgo(parked.parkedAt),
        parked.replayRequestedAt
          ? el('span', { class: 'cell-note' }, 'replay requested ', timeAgo(parked.replayRequestedAt))
          : null,
      ),
      el(
        'span',
        { class: 'actions' },
        button('view-parked-events', 'Events', 'Open the parked events of key', false),
        replayable ? button('replay-key', 'Replay', 'Replay the parked key', true) : '',
        readOnly ? '' : button('drop-key', 'Drop', 'Drop the parked key', true),
      ),
    ];
  });
  const table = simpleTable(
    `Parked keys of ${c.name}`,
    ['Key', 'First event', 'Error', 'Events', 'Parked', 'Actions'],
    rows,
  );
  table.querySelectorAll('tbody tr').forEach((tr, i) => {
    const parked = keys[i];
    if (parked) tr.setAttribute('data-parked-key', parked.key);
  });
  nodes.push(table);
  return nodes;
}

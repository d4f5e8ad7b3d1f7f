// @ts-check
// The Rebuilds panel above the consumers (docs/operating.md, "Dashboard"): each versioned consumer's
// version on its way to take over, with its progress, position and head, rate and time left, and
// the operator actions on it: Approve (force only as a second, explicit step after the server
// refused an approval as too far behind), Pause, Resume, Abandon. Cards are kept between polls and
// updated in place, so keyboard focus survives a refresh.
import { ApiError, api, consumerPath } from './api.js';
import { openDialog, setConfirmLabel } from './dialog.js';
import { byId, el, nextId, present } from './dom.js';
import { formatDuration, formatRate, plural, timeAgo } from './format.js';
import {
  approveWithin,
  behind,
  describeChange,
  progressPercent,
  REBUILD_ACTION_NAMES,
  REBUILD_ACTIONS,
  rebuildActions,
  takeoverNote,
  versionLabel,
  versionsNote,
} from './rebuild-policy.js';
import { readOnly, state } from './state.js';

/** @typedef {import('./types.js').RebuildProgress} RebuildProgress */
/** @typedef {import('./types.js').RebuildStatus} RebuildStatus */
/** @typedef {import('./rebuild-policy.js').RebuildAction} RebuildAction */

/**
 * @typedef {object} Card
 * @property {HTMLLIElement} li
 * @property {HTMLElement} title
 * @property {HTMLElement} badge
 * @property {HTMLElement} started
 * @property {HTMLProgressElement} bar
 * @property {HTMLElement} percent
 * @property {HTMLElement} meter the bar and its percentage
 * @property {HTMLElement} figures
 * @property {Record<'position' | 'behind' | 'rate' | 'left', HTMLElement>} values
 * @property {HTMLElement} note
 * @property {Partial<Record<RebuildAction, HTMLButtonElement>>} buttons
 */

/** `<consumer>\0<version>` → its card. @type {Map<string, Card>} */
const cards = new Map();

/** @param {RebuildProgress} r */
const keyOf = (r) => `${r.consumer}\u0000${r.version}`;

/** @param {RebuildProgress} r @returns {Card} */
function createCard(r) {
  const label = versionLabel(r);
  const li = el('li', { class: 'rebuild', 'data-rebuild': r.consumer, 'data-version': r.version });
  const title = el('h3', { class: 'rebuild-title' });
  const badge = el('span', { class: 'badge' });
  const started = el('span', { class: 'cell-note' });
  const bar = el('progress', {
    class: 'rebuild-bar',
    max: 100,
    value: 0,
    'aria-label': `Progress of ${label}`,
  });
  const percent = el('span', { class: 'rebuild-percent', 'aria-hidden': 'true' });
  const meter = el('div', { class: 'rebuild-meter' }, bar, percent);
  /** @param {string} term */
  const figure = (term) => {
    const value = el('dd');
    return { value, node: el('div', {}, el('dt', { text: term }), value) };
  };
  const position = figure('Position / head');
  const lag = figure('Behind');
  const rate = figure('Rate');
  const left = figure('Time left');
  const figures = el('dl', { class: 'rebuild-figures' }, position.node, lag.node, rate.node, left.node);
  const note = el('p', { class: 'rebuild-note' });
  /** @type {Card['buttons']} */
  const buttons = {};
  const group = el('div', { class: 'actions', role: 'group', 'aria-label': `Actions on ${label}` });
  if (!readOnly) {
    for (const action of REBUILD_ACTIONS) {
      const text = REBUILD_ACTION_NAMES[action];
      const button = el('button', {
        type: 'button',
        class: 'write',
        'data-action': `${action}-rebuild`,
        'aria-haspopup': 'dialog',
        'aria-label': `${text} ${label}`,
        text,
      });
      buttons[action] = button;
      group.append(button);
    }
  }
  li.append(
    ...present([
      el('div', { class: 'rebuild-head' }, title, badge, started),
      meter,
      figures,
      note,
      readOnly ? null : group,
    ]),
  );
  return {
    li,
    title,
    badge,
    started,
    bar,
    percent,
    meter,
    figures,
    values: { position: position.value, behind: lag.value, rate: rate.value, left: left.value },
    note,
    buttons,
  };
}

/** @param {Card} card @param {RebuildProgress} r */
function updateCard(card, r) {
  card.li.setAttribute('data-rebuild-state', r.state);
  card.title.replaceChildren(
    el('span', { class: 'consumer-name', text: r.consumer }),
    el('span', {
      class: 'rebuild-versions',
      text:
        r.liveVersion === null || r.liveVersion === undefined
          ? `v${r.version}`
          : `v${r.liveVersion} live → v${r.version}`,
    }),
  );
  card.badge.className = `badge badge-rebuild badge-${r.state}`;
  card.badge.textContent = r.state;
  card.started.replaceChildren('started ', timeAgo(r.startedAt));

  // A version with side effects has no rows of its own to rebuild: no bar, no figures.
  const percent = progressPercent(r);
  card.meter.hidden = percent === null;
  if (percent === null) card.li.removeAttribute('data-progress');
  else {
    card.li.setAttribute('data-progress', String(percent));
    card.bar.value = percent;
    card.percent.textContent = `${percent}%`;
  }
  const lag = behind(r);
  card.figures.hidden = r.position === null || r.position === undefined;
  if (!card.figures.hidden) {
    card.li.setAttribute('data-position', r.position ?? '');
    card.li.setAttribute('data-head', r.head);
    card.values.position.replaceChildren(
      el('span', { class: 'mono', text: r.position ?? '—' }),
      el('span', { class: 'cell-note' }, 'of ', el('span', { class: 'mono', text: r.head })),
    );
    card.values.behind.replaceChildren(
      el('span', { text: lag === null ? '—' : plural(lag.toString(), 'event') }),
      el('span', {
        class: 'cell-note',
        text: `${r.takeoverWithin ? 'takes over' : 'approve'} within ${approveWithin(r)}`,
      }),
    );
    const rate = r.ratePerSecond;
    card.values.rate.replaceChildren(
      el('span', { text: typeof rate === 'number' ? `${formatRate(rate)} events/s` : '—' }),
      el('span', { class: 'cell-note', text: 'since it started' }),
    );
    card.values.left.textContent =
      lag === 0n
        ? 'caught up'
        : r.state === 'paused'
          ? 'paused'
          : typeof r.etaSeconds === 'number'
            ? formatDuration(r.etaSeconds)
            : '—';
  }
  card.note.textContent = takeoverNote(r);

  const applicable = new Set(rebuildActions(r));
  for (const action of REBUILD_ACTIONS) {
    const button = card.buttons[action];
    if (button) button.hidden = !applicable.has(action);
  }
}

/**
 * Shows a poll's versioned consumers: a card per version on its way (new cards added, gone ones
 * removed, the rest updated in the server's order), and a line for the others' retired versions.
 * The panel is hidden while there is neither.
 * @param {RebuildStatus[]} statuses
 */
export function renderRebuilds(statuses) {
  state.rebuilds = new Map(statuses.map((s) => [s.consumer, s]));
  const list = byId('rebuild-list', HTMLElement);
  const seen = new Set();
  /** @type {Card | null} */
  let previous = null;
  for (const s of statuses) {
    const r = s.rebuild;
    if (!r) continue;
    const key = keyOf(r);
    seen.add(key);
    let card = cards.get(key);
    if (!card) {
      card = createCard(r);
      cards.set(key, card);
    }
    updateCard(card, r);
    // Moved only when needed: moving drops keyboard focus.
    const wanted = previous ? previous.li.nextElementSibling : list.firstElementChild;
    if (wanted !== card.li) list.insertBefore(card.li, wanted);
    previous = card;
  }
  for (const [key, card] of cards) {
    if (seen.has(key)) continue;
    card.li.remove();
    cards.delete(key);
  }
  list.hidden = cards.size === 0;

  const notes = statuses
    .filter((s) => !s.rebuild)
    .map((s) => ({ consumer: s.consumer, text: versionsNote(s) }))
    .filter((n) => n.text !== null);
  const versions = byId('versions-note', HTMLElement);
  versions.hidden = notes.length === 0;
  versions.replaceChildren(
    ...present(
      notes.flatMap((n, i) => [
        i > 0 ? ' · ' : null,
        el('span', { 'data-versions': n.consumer }, el('strong', { text: n.consumer }), ` ${n.text}`),
      ]),
    ),
    notes.length > 0
      ? '. A retired version keeps its rows until dropped (sluice rebuild drop <name>@v<N>).'
      : '',
  );
  byId('rebuilds', HTMLElement).hidden = cards.size === 0 && notes.length === 0;
}

/**
 * Posts an action on the version the operator saw: if another version is on its way by now, the
 * server refuses (404) rather than act on that one.
 * @param {RebuildAction} action @param {RebuildProgress} r @param {object} body
 */
async function post(action, r, body) {
  const path = consumerPath({ name: r.consumer, instanceId: '*' }, `/rebuild/${action}`);
  return /** @type {import('./types.js').VersionChange} */ (
    await api('POST', path, { version: r.version, ...body })
  );
}

/** "version 1", or "the live version". @param {RebuildProgress} r */
function liveText(r) {
  return r.liveVersion === null || r.liveVersion === undefined
    ? 'the live version'
    : `version ${r.liveVersion}`;
}

/** @param {string} text */
function capitalized(text) {
  return `${text.charAt(0).toUpperCase()}${text.slice(1)}`;
}

/**
 * The force checkbox an approval offers once the server refused it as too far behind.
 * @param {RebuildProgress} r
 */
function forceChoice(r) {
  const id = nextId('force');
  const input = el('input', { type: 'checkbox', id, 'data-force': true });
  input.addEventListener('change', () =>
    setConfirmLabel(input.checked ? 'Approve with force' : 'Approve', input.checked),
  );
  const node = el(
    'div',
    { class: 'choice force-choice' },
    input,
    el('label', {
      for: id,
      text:
        `Approve with force: ${liveText(r)} stops now and serves stale data until version ${r.version} ` +
        'has caught up to where it stopped.',
    }),
  );
  return { node, input };
}

/** @param {RebuildProgress} r @param {HTMLElement} opener */
function approveAction(r, opener) {
  const label = versionLabel(r);
  const lag = behind(r);
  const description = r.sideEffects
    ? `Version ${r.version} takes the consumer's rows over now, at the position ${liveText(r)} ` +
      'reached: from its next turn on only the new version runs, and nothing is sent twice or skipped.'
    : `${capitalized(liveText(r))} stops at a barrier (the highest of its cursors now) and keeps ` +
      `serving what it has; version ${r.version} becomes live once it has reached the barrier with no ` +
      `pending gap below, at once if it already has. ${
        lag === null ? '' : `It is ${plural(lag.toString(), 'event')} behind the head; `
      }the server refuses while it is more than ${approveWithin(r)} behind.`;
  /** @type {ReturnType<typeof forceChoice> | null} */
  let force = null;
  openDialog({
    title: `Approve the takeover of ${label}`,
    description,
    confirmLabel: 'Approve',
    opener,
    onConfirm: async (extra) => {
      const forced = force?.input.checked === true;
      try {
        const change = await post('approve', r, { ...(forced ? { force: true } : {}), ...extra });
        return describeChange('approve', change, r);
      } catch (error) {
        // Too far behind: force is offered now, as a second step the operator takes explicitly.
        if (force === null && error instanceof ApiError && error.code === 'SLUICE_REBUILD_NOT_READY') {
          force = forceChoice(r);
          byId('dialog-fields', HTMLElement).append(force.node);
          force.input.focus();
        }
        throw error;
      }
    },
  });
}

/** @param {RebuildAction} action @param {RebuildProgress} r @param {HTMLElement} opener */
function changeAction(action, r, opener) {
  const label = versionLabel(r);
  const old = liveText(r);
  /** @type {Record<'pause' | 'resume' | 'abandon', { title: string, description: string }>} */
  const texts = {
    pause: {
      title: `Pause the rebuild of ${label}`,
      description: `Its rows stop where they are until it is resumed; ${old} goes on serving.`,
    },
    resume: {
      title: `Resume the rebuild of ${label}`,
      description: 'Its rows go on from where they stopped.',
    },
    abandon: {
      title: `Abandon ${label}`,
      description: r.sideEffects
        ? `Version ${r.version} will not take over: ${old} goes on with the rows. It is not run again; ` +
          'to try again, deploy a higher version.'
        : `Its consumer rows (cursors, gaps, crash records, dead letters) are removed and it is not run ` +
          `again: to rebuild, deploy a higher version. ${capitalized(old)} goes on` +
          `${r.state === 'taking-over' ? ' from where the takeover stopped it' : ''}. The tables its ` +
          "handler wrote are the application's and are left alone.",
    },
  };
  if (action === 'approve') return;
  const text = texts[action];
  openDialog({
    title: text.title,
    description: text.description,
    confirmLabel: REBUILD_ACTION_NAMES[action],
    danger: action === 'abandon',
    opener,
    onConfirm: async (extra) => describeChange(action, await post(action, r, extra), r),
  });
}

/** Wires the panel's buttons; once, at start. */
export function setUpRebuilds() {
  byId('rebuild-list', HTMLElement).addEventListener('click', (event) => {
    const button = event.target instanceof Element ? event.target.closest('button[data-action]') : null;
    if (!(button instanceof HTMLButtonElement) || button.disabled) return;
    const li = button.closest('li[data-rebuild]');
    const r = state.rebuilds.get(li?.getAttribute('data-rebuild') ?? '')?.rebuild;
    // The card is of the version the last poll showed.
    if (!r || String(r.version) !== li?.getAttribute('data-version')) return;
    const action = REBUILD_ACTIONS.find((a) => button.getAttribute('data-action') === `${a}-rebuild`);
    if (action === 'approve') approveAction(r, button);
    else if (action) changeAction(action, r, button);
  });
}

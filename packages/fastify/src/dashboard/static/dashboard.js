// @ts-check
// The Sluice ops dashboard: plain ES modules, no dependencies, served with a strict
// Content-Security-Policy (script-src 'self'). It polls the ops routes of its own prefix and offers
// the operator actions documented in docs/operating.md. Everything it shows is set as text.
//
//   ui/api.js       the ops API and the bearer token       ui/table.js    the consumers table
//   ui/state.js     what the modules share                  ui/detail.js   diagnosis, dead letters,
//                                                                          parked keys, charts
//   ui/policy.js    which actions apply, error state,       ui/actions.js  the operator actions
//                   lanes and parked keys
//   ui/history.js   lag and throughput samples              ui/dialog.js   the confirmation dialog
//   ui/charts.js    SVG charts                              ui/payload.js  the payload dialog
//   ui/sign-in.js   the bearer-token sign-in                ui/status.js   status line, banner, results
//   ui/rebuilds.js  the Rebuilds panel, its actions         ui/rebuild-policy.js  what a rebuild offers
import {
  disableAction,
  dropKeyAction,
  enableAction,
  fenceAction,
  replayAction,
  replayKeyAction,
  restartAction,
  skipAction,
} from './ui/actions.js';
import { ApiError, api, readToken, writeToken } from './ui/api.js';
import { setUpDialog } from './ui/dialog.js';
import { byId } from './ui/dom.js';
import { afterPoll, closeDetail, detailConsumer, openDetail, refreshDetail } from './ui/detail.js';
import { keyOf } from './ui/format.js';
import {
  openDeadLetterPayload,
  openEventPayload,
  openParkedEventsPayload,
  setUpPayloadDialog,
} from './ui/payload.js';
import { renderRebuilds, setUpRebuilds } from './ui/rebuilds.js';
import { askForToken, HISTORY_KEY, setUpSignIn, signedIn } from './ui/sign-in.js';
import { authMode, hooks, readOnly, REFRESH_MS, state } from './ui/state.js';
import { pollFailureMessage, setBanner, updateRefreshStatus } from './ui/status.js';
import { hasRows, renderConsumers, setPlaceholder } from './ui/table.js';

/** @typedef {import('./ui/types.js').ConsumerSummary} ConsumerSummary */
/** @typedef {import('./ui/types.js').RebuildStatus} RebuildStatus */

function schedule() {
  clearTimeout(state.timer);
  state.timer = undefined;
  if (state.paused || state.modals > 0 || state.signedOut || document.hidden) return;
  state.timer = setTimeout(() => void poll(), REFRESH_MS);
}

async function poll() {
  clearTimeout(state.timer);
  if (state.loading) return;
  state.loading = true;
  try {
    const [answer, versioned] = await Promise.all([api('GET', 'consumers'), api('GET', 'rebuilds')]);
    const consumers = Array.isArray(answer) ? /** @type {ConsumerSummary[]} */ (answer) : [];
    const rebuilds = Array.isArray(versioned) ? /** @type {RebuildStatus[]} */ (versioned) : [];
    const now = Date.now();
    state.lastSuccess = new Date(now);
    state.lastFailed = false;
    state.consumers = new Map(consumers.map((c) => [keyOf(c), c]));
    for (const c of consumers) state.history.record(keyOf(c), now, c.cursor, c.lagEvents);
    state.history.keepOnly(new Set(state.consumers.keys()));
    signedIn();
    renderConsumers(consumers, now);
    renderRebuilds(rebuilds);
    afterPoll();
    setBanner(null);
  } catch (error) {
    state.lastFailed = true;
    if (error instanceof ApiError && error.status === 401 && authMode === 'token') {
      const refused = readToken() !== '';
      // A refused token is forgotten: a reload must not send it again.
      if (refused) writeToken('');
      setBanner(null);
      askForToken(refused ? 'The server refused this token: check it and sign in again.' : null);
    } else {
      setBanner(pollFailureMessage(error));
      if (!hasRows()) setPlaceholder('No data: see the message above.');
    }
  } finally {
    state.loading = false;
    updateRefreshStatus();
    schedule();
  }
}

/** @param {HTMLButtonElement} button @param {ConsumerSummary} c */
function runAction(button, c) {
  const action = button.getAttribute('data-action');
  switch (action) {
    case 'diagnose':
    case 'dead-letters':
    case 'parked-keys':
    case 'trends':
      openDetail(action, c, button);
      return;
    case 'view-event': {
      const id = button.getAttribute('data-event-id');
      if (id) openEventPayload(c, id, button);
      return;
    }
    case 'view-dead-letter': {
      const id = button.getAttribute('data-dead-letter-id');
      if (id) openDeadLetterPayload(c, id, button);
      return;
    }
    case 'restart':
      restartAction(c, button);
      return;
    case 'disable':
      disableAction(c, button);
      return;
    case 'enable':
      enableAction(c, button);
      return;
    case 'skip':
      skipAction(c, button);
      return;
    case 'replay': {
      const id = button.getAttribute('data-dead-letter-id');
      replayAction(c, button, id ? [id] : undefined);
      return;
    }
    case 'fence':
      fenceAction(c, button);
      return;
    // A parked key's actions, from the Parked keys panel: the key is any text, '' included.
    case 'view-parked-events':
    case 'replay-key':
    case 'drop-key': {
      const key = button.getAttribute('data-key');
      if (key === null) return;
      const count = Number(button.getAttribute('data-events'));
      const events = Number.isSafeInteger(count) && count > 0 ? count : null;
      if (action === 'view-parked-events') openParkedEventsPayload(c, key, button);
      else if (action === 'replay-key') replayKeyAction(c, key, events, button);
      else dropKeyAction(c, key, events, button);
      return;
    }
    default:
      return;
  }
}

/** The action button a click landed on, if any. @param {Event} event */
function actionButton(event) {
  const button = event.target instanceof Element ? event.target.closest('button[data-action]') : null;
  return button instanceof HTMLButtonElement && !button.disabled ? button : null;
}

function restoreHistory() {
  try {
    const saved = sessionStorage.getItem(HISTORY_KEY);
    if (saved) state.history.restore(JSON.parse(saved), Date.now());
  } catch {
    // Nothing saved, or storage refused: the charts start now.
  }
}

function saveHistory() {
  if (state.signedOut) return;
  try {
    sessionStorage.setItem(HISTORY_KEY, JSON.stringify(state.history.save()));
  } catch {
    // Storage refused or full: a reload starts the charts afresh.
  }
}

function start() {
  hooks.poll = () => void poll();
  hooks.refreshDetail = refreshDetail;
  setUpDialog();
  setUpPayloadDialog();
  setUpSignIn();
  setUpRebuilds();

  byId('consumer-rows', HTMLElement).addEventListener('click', (event) => {
    const button = actionButton(event);
    const tr = button?.closest('tr[data-consumer]');
    if (!button || !tr) return;
    const key = keyOf({
      name: tr.getAttribute('data-consumer') ?? '',
      instanceId: tr.getAttribute('data-instance') ?? '',
    });
    const c = state.consumers.get(key);
    if (c) runAction(button, c);
  });
  byId('detail-body', HTMLElement).addEventListener('click', (event) => {
    const button = actionButton(event);
    const c = detailConsumer();
    if (button && c) runAction(button, c);
  });
  byId('detail-close', HTMLButtonElement).addEventListener('click', closeDetail);
  byId('detail-refresh', HTMLButtonElement).addEventListener('click', refreshDetail);
  byId('detail', HTMLElement).addEventListener('keydown', (event) => {
    if (event.key === 'Escape' && state.modals === 0) closeDetail();
  });

  const pauseButton = byId('refresh-toggle', HTMLButtonElement);
  pauseButton.addEventListener('click', () => {
    state.paused = !state.paused;
    pauseButton.setAttribute('aria-pressed', String(state.paused));
    pauseButton.textContent = state.paused ? 'Resume auto-refresh' : 'Pause auto-refresh';
    if (state.paused) clearTimeout(state.timer);
    else void poll();
    updateRefreshStatus();
  });
  byId('refresh-now', HTMLButtonElement).addEventListener('click', () => void poll());
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden) void poll();
  });
  window.addEventListener('pagehide', saveHistory);

  byId('read-only-note', HTMLElement).hidden = !readOnly;
  restoreHistory();
  void poll();
}

start();

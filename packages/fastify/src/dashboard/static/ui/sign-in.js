// @ts-check
// Signing in with a bearer token, where the browser cannot prompt for credentials by itself
// (docs/operating.md, "Dashboard"). The token stays in this tab's sessionStorage and goes out as
// `Authorization: Bearer` with every API call (api.js); nothing of the ops data is shown until the
// API accepts it.
import { readToken, writeToken } from './api.js';
import { byId } from './dom.js';
import { authMode, hooks, state } from './state.js';
import { updateRefreshStatus } from './status.js';

/** Saved lag and throughput samples of this tab (written by the entry module on leaving). */
export const HISTORY_KEY = 'sluice.ops.history';

/** Drops the lag and throughput samples, in the page and in the tab's storage. */
function forgetHistory() {
  state.history.keepOnly(new Set());
  try {
    sessionStorage.removeItem(HISTORY_KEY);
  } catch {
    // Storage refused: nothing was saved there either.
  }
}

/**
 * Shows the sign-in form in place of the data, and stops polling until a token is given.
 * @param {string | null} problem why the previous token was not accepted, if there was one
 */
export function askForToken(problem) {
  const wasSignedOut = state.signedOut;
  state.signedOut = true;
  forgetHistory();
  byId('sign-in', HTMLElement).hidden = false;
  byId('main', HTMLElement).hidden = true;
  byId('sign-out', HTMLButtonElement).hidden = true;
  setRefreshButtons(false);
  const status = byId('token-status', HTMLElement);
  status.textContent =
    problem ?? 'It stays in this tab (sessionStorage) until you sign out or close the tab.';
  status.classList.toggle('dialog-error', problem !== null);
  if (!wasSignedOut || problem !== null) byId('token-input', HTMLInputElement).focus();
  updateRefreshStatus();
}

/** The API answered: the data is shown, and Sign out is offered when a token is in use. */
export function signedIn() {
  state.signedOut = false;
  byId('sign-in', HTMLElement).hidden = true;
  byId('main', HTMLElement).hidden = false;
  byId('sign-out', HTMLButtonElement).hidden = !(authMode === 'token' && readToken());
  setRefreshButtons(true);
}

/** The refresh buttons have nothing to refresh until the API accepts a token. @param {boolean} shown */
function setRefreshButtons(shown) {
  byId('refresh-toggle', HTMLButtonElement).hidden = !shown;
  byId('refresh-now', HTMLButtonElement).hidden = !shown;
}

/** Wires the form and the Sign out button; once, at start. */
export function setUpSignIn() {
  byId('token-form', HTMLFormElement).addEventListener('submit', (event) => {
    event.preventDefault();
    const input = byId('token-input', HTMLInputElement);
    const token = input.value.trim();
    if (!token) return;
    writeToken(token);
    input.value = '';
    byId('token-status', HTMLElement).textContent = 'Checking the token…';
    state.signedOut = false;
    hooks.poll();
  });
  byId('sign-out', HTMLButtonElement).addEventListener('click', () => {
    writeToken('');
    // Nothing of the ops data stays in the page or in the tab's storage: signed out, the page
    // saves no samples when it unloads, and the reload shows the sign-in form.
    state.signedOut = true;
    forgetHistory();
    location.reload();
  });
}

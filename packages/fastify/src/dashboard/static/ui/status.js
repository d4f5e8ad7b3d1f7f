// @ts-check
// The refresh status line, the error banner and the result region.
import { ApiError, describeError } from './api.js';
import { byId, el } from './dom.js';
import { authMode, REFRESH_MS, state } from './state.js';

export function updateRefreshStatus() {
  const parts = [];
  if (state.lastSuccess) parts.push(`Last refresh ${state.lastSuccess.toLocaleTimeString()}`);
  else parts.push(state.lastFailed ? 'Not loaded yet' : 'Loading…');
  if (state.lastFailed && state.lastSuccess) parts.push('the latest attempt failed');
  if (state.signedOut) parts.push('waiting for a token');
  else if (state.paused) parts.push('auto-refresh paused');
  else if (state.modals > 0) parts.push('auto-refresh paused while a dialog is open');
  else parts.push(`auto-refresh every ${REFRESH_MS / 1000} s`);
  byId('refresh-status', HTMLElement).textContent = parts.join(' · ');
}

/** @param {string | null} message */
export function setBanner(message) {
  const banner = byId('error-banner', HTMLElement);
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
  byId('consumers', HTMLElement).classList.toggle('stale', message !== null);
  byId('rebuilds', HTMLElement).classList.toggle('stale', message !== null);
}

/** @param {unknown} error */
export function pollFailureMessage(error) {
  const retry = state.paused ? '' : ` Retrying every ${REFRESH_MS / 1000} s.`;
  if (error instanceof ApiError && error.status === 401) {
    return authMode === 'browser'
      ? `Not authorised: the ops API answered 401. Reload the page to sign in again.${retry}`
      : 'Not authorised: the ops API answered 401. Sign in with the ops bearer token below.';
  }
  if (error instanceof ApiError && error.status === 0) {
    return `Cannot reach the ops API: ${error.message}.${retry}`;
  }
  return `The ops API failed: ${describeError(error)}.${retry}`;
}

/** @param {string} message @param {'success' | 'error' | 'info'} kind */
export function showResult(message, kind) {
  const region = byId('result', HTMLElement);
  region.className = `result result-${kind}`;
  region.replaceChildren(
    el('span', { class: 'result-time', text: `${new Date().toLocaleTimeString()} ` }),
    el('span', { 'data-result': kind, text: message }),
  );
}

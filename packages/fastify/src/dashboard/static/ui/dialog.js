// @ts-check
// The confirmation dialog of the operator actions, its form fields, and focus handling shared by
// every dialog and panel.
import { describeError } from './api.js';
import { byId, el, nextId } from './dom.js';
import { visible } from './visible.js';
import { hooks, state } from './state.js';
import { showResult, updateRefreshStatus } from './status.js';

/**
 * @typedef {object} DialogOptions
 * @property {string} title
 * @property {string} description
 * @property {Node[]} [fields]
 * @property {string} confirmLabel
 * @property {boolean} [danger]
 * @property {HTMLElement | null} opener the button that opened it: focus returns there
 * @property {(extra: { reason?: string }) => Promise<string>} onConfirm does the action and
 *   resolves to the message that says what it did
 * @property {(ready: (description: string, enabled: boolean) => void) => void} [prepare] runs
 *   first (a dry run); Confirm stays disabled until it calls `ready(description, true)`
 * @property {() => string | null} [validate] a problem with the fields, checked on Confirm
 */

/**
 * @typedef {object} OpenDialog
 * @property {DialogOptions['onConfirm']} onConfirm
 * @property {DialogOptions['validate']} validate
 * @property {HTMLElement | null} opener
 * @property {boolean} busy
 * @property {boolean} ready
 * @property {string} failure
 */

/** @type {OpenDialog | null} */
let current = null;

const dialog = () => byId('action-dialog', HTMLDialogElement);
const confirmButton = () => byId('dialog-confirm', HTMLButtonElement);

/** @param {string | null} message */
export function setDialogError(message) {
  const node = byId('dialog-error', HTMLElement);
  node.textContent = message ?? '';
  node.hidden = !message;
}

/**
 * Back to the element that opened a dialog or panel, else its nearest usable neighbour (an action
 * that no longer applies is no longer shown), else the panel or the main region.
 * @param {HTMLElement | null | undefined} opener
 */
export function restoreFocus(opener) {
  if (
    opener &&
    opener.isConnected &&
    !opener.hidden &&
    !(opener instanceof HTMLButtonElement && opener.disabled)
  ) {
    opener.focus();
    return;
  }
  const group = opener && opener.isConnected ? opener.closest('.actions') : null;
  const neighbour = group ? group.querySelector('button:not([disabled]):not([hidden])') : null;
  if (neighbour instanceof HTMLElement) neighbour.focus();
  else if (state.detail) byId('detail-title', HTMLElement).focus();
  else byId('main', HTMLElement).focus();
}

/** Counts a modal dialog as open: polling waits while the page behind it is inert. */
export function modalOpened() {
  state.modals += 1;
  clearTimeout(state.timer);
  updateRefreshStatus();
}

/** The counterpart of {@link modalOpened}: polls at once, then on schedule. */
export function modalClosed() {
  state.modals = Math.max(0, state.modals - 1);
  hooks.poll();
}

/** Opens the confirmation dialog. @param {DialogOptions} options */
export function openDialog(options) {
  const {
    title,
    description,
    fields = [],
    confirmLabel,
    danger = false,
    opener,
    onConfirm,
    prepare,
  } = options;
  byId('dialog-title', HTMLElement).textContent = title;
  byId('dialog-description', HTMLElement).textContent = visible(description);
  byId('dialog-fields', HTMLElement).replaceChildren(...fields);
  byId('dialog-reason', HTMLInputElement).value = '';
  setDialogError(null);
  const confirm = confirmButton();
  confirm.textContent = confirmLabel;
  confirm.classList.toggle('danger', danger);
  confirm.disabled = Boolean(prepare);
  /** @type {OpenDialog} */
  const context = {
    onConfirm,
    validate: options.validate,
    opener,
    busy: false,
    ready: !prepare,
    failure: `${title} failed`,
  };
  current = context;
  modalOpened();
  dialog().showModal();
  const first = byId('dialog-fields', HTMLElement).querySelector('input:not([disabled]), select');
  (first instanceof HTMLElement ? first : byId('dialog-cancel', HTMLButtonElement)).focus();
  if (prepare) {
    prepare((text, enabled) => {
      if (current !== context) return;
      byId('dialog-description', HTMLElement).textContent = visible(text);
      context.ready = enabled;
      confirm.disabled = !enabled;
    });
  }
}

/**
 * Relabels the open dialog's Confirm button: an action that becomes a more serious one (an
 * approval with force).
 * @param {string} label @param {boolean} danger
 */
export function setConfirmLabel(label, danger) {
  const confirm = confirmButton();
  confirm.textContent = label;
  confirm.classList.toggle('danger', danger);
}

/** Wires the dialog's buttons and its form; once, at start. */
export function setUpDialog() {
  dialog().addEventListener('close', () => {
    const context = current;
    current = null;
    restoreFocus(context?.opener);
    modalClosed();
  });
  byId('dialog-cancel', HTMLButtonElement).addEventListener('click', () => dialog().close());
  byId('dialog-form', HTMLFormElement).addEventListener('submit', (event) => {
    event.preventDefault();
    const context = current;
    if (!context || context.busy || !context.ready) return;
    const problem = context.validate?.() ?? null;
    if (problem !== null) {
      setDialogError(problem);
      return;
    }
    const confirm = confirmButton();
    context.busy = true;
    confirm.disabled = true;
    confirm.setAttribute('aria-busy', 'true');
    setDialogError(null);
    const reason = byId('dialog-reason', HTMLInputElement).value.trim();
    Promise.resolve()
      .then(() => context.onConfirm(reason ? { reason } : {}))
      .then(
        (message) => {
          // Closed first: while the modal is open, the page behind it (the result region) is inert.
          if (current === context) dialog().close();
          showResult(message, 'success');
          hooks.refreshDetail();
        },
        (/** @type {unknown} */ error) => {
          const message = `${context.failure}: ${describeError(error)}`;
          showResult(message, 'error');
          if (current === context) setDialogError(message);
        },
      )
      .finally(() => {
        context.busy = false;
        confirm.removeAttribute('aria-busy');
        if (current === context) confirm.disabled = !context.ready;
      });
  });
}

/**
 * An input with its label (or, with a null label, an `aria-label` among the attributes) and hint.
 * @param {Record<string, unknown>} attributes @param {string | null} labelText @param {string} [hint]
 */
export function field(attributes, labelText, hint) {
  const id = typeof attributes['id'] === 'string' ? attributes['id'] : nextId('field');
  const hintId = hint ? nextId('hint') : null;
  const input = el('input', {
    type: 'text',
    autocomplete: 'off',
    ...attributes,
    id,
    'aria-describedby': hintId,
  });
  const hintNode = hint && hintId ? el('p', { id: hintId, class: 'hint', text: hint }) : null;
  return {
    input,
    hint: hintNode,
    node: el(
      'div',
      { class: 'field' },
      labelText === null ? null : el('label', { for: id, text: labelText }),
      input,
      hintNode,
    ),
  };
}

/**
 * A radio group; `extra` nodes follow the choice they belong to.
 * @param {string} legend @param {string} name
 * @param {Array<{ value: string, label: string, checked?: boolean, extra?: Node }>} choices
 */
export function radioGroup(legend, name, choices) {
  const fieldset = el('fieldset', { class: 'choices' }, el('legend', { text: legend }));
  /** @type {HTMLInputElement[]} */
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
        choice.extra ?? null,
      ),
    );
  }
  const selected = () => inputs.find((input) => input.checked)?.value ?? null;
  return { node: fieldset, inputs, selected };
}

/**
 * Enables `input` only while the radio `value` is chosen.
 * @param {ReturnType<typeof radioGroup>} group @param {string} value @param {HTMLInputElement} input
 */
export function linkChoice(group, value, input) {
  const sync = () => {
    input.disabled = group.selected() !== value;
    input.required = !input.disabled;
  };
  for (const radio of group.inputs) radio.addEventListener('change', sync);
  sync();
}

// @ts-check
// The payload dialog: one event a consumer is stuck on, one dead letter, or the events set aside
// under a parked key, with their data and metadata as the server's `ops.redact` left them.
import { api, consumerPath, describeError, queryOf } from './api.js';
import { modalClosed, modalOpened, restoreFocus } from './dialog.js';
import { byId, el } from './dom.js';
import { visible } from './visible.js';
import { clockTime, labelOf, plural, timeAgo } from './format.js';
import { PARKED_LIMIT } from './state.js';

/** @typedef {import('./types.js').ConsumerSummary} ConsumerSummary */

/** @type {HTMLElement | null} */
let opener = null;

const dialog = () => byId('payload-dialog', HTMLDialogElement);

/** @param {Array<[string, Node | string]>} pairs */
function facts(pairs) {
  const dl = el('dl', { class: 'facts' });
  for (const [term, value] of pairs) dl.append(el('dt', { text: term }), el('dd', {}, value));
  return dl;
}

/** @param {string} title @param {unknown} value @param {string} name */
function json(title, value, name) {
  return el(
    'section',
    { class: 'payload-part' },
    el('h3', { text: title }),
    el('pre', {
      class: 'payload',
      'data-payload': name,
      tabindex: 0,
      text: JSON.stringify(value ?? null, null, 2),
    }),
  );
}

/**
 * Opens the dialog at once (its body says it is loading) and fills it when `load` settles.
 * @param {string} title @param {HTMLElement | null} from @param {() => Promise<Node[]>} load
 * @param {string} kind
 */
function open(title, from, load, kind) {
  const body = byId('payload-body', HTMLElement);
  byId('payload-title', HTMLElement).textContent = visible(title);
  body.replaceChildren(el('p', { class: 'muted', text: 'Loading…' }));
  body.setAttribute('aria-busy', 'true');
  dialog().setAttribute('data-payload-kind', kind);
  opener = from;
  modalOpened();
  dialog().showModal();
  byId('payload-close', HTMLButtonElement).focus();
  load().then(
    (nodes) => {
      body.replaceChildren(...nodes);
      body.removeAttribute('aria-busy');
    },
    (/** @type {unknown} */ error) => {
      body.replaceChildren(el('p', { class: 'detail-error', role: 'alert', text: describeError(error) }));
      body.removeAttribute('aria-busy');
    },
  );
}

const REDACTION_NOTE =
  'Data and metadata as the server shows them to operators: its ops.redact option, when set, has already ' +
  'removed what it hides.';

/**
 * The event of the log a consumer is stuck on (or any event id, in its context).
 * @param {ConsumerSummary} c @param {string} eventId @param {HTMLElement | null} from
 */
export function openEventPayload(c, eventId, from) {
  open(
    `Event ${eventId} of ${labelOf(c)}`,
    from,
    async () => {
      const event = /** @type {import('./types.js').ConsumerEvent} */ (
        await api('GET', consumerPath(c, `/events/${encodeURIComponent(eventId)}${queryOf(c)}`))
      );
      return [
        facts([
          ['Type', event.type],
          ['Stream', el('span', { class: 'mono', text: event.streamId })],
          ['Appended', el('span', {}, clockTime(event.createdAt), ' (', timeAgo(event.createdAt), ')')],
          [
            'For this consumer',
            event.stuck
              ? `it is stuck on this event (${plural(c.attempts, 'failed attempt')}${c.status === 'dead' ? ', dead' : ''})`
              : 'not the event it is stuck on',
          ],
        ]),
        el('p', { class: 'hint', text: REDACTION_NOTE }),
        json('Data', event.data, 'data'),
        json('Metadata', event.metadata, 'metadata'),
      ];
    },
    'event',
  );
}

/**
 * One dead letter of a consumer.
 * @param {ConsumerSummary} c @param {string} id @param {HTMLElement | null} from
 */
export function openDeadLetterPayload(c, id, from) {
  open(
    `Dead letter ${id} of ${labelOf(c)}`,
    from,
    async () => {
      const letter = /** @type {import('./types.js').DeadLetter} */ (
        await api('GET', consumerPath(c, `/dead-letters/${encodeURIComponent(id)}${queryOf(c)}`))
      );
      const replay = letter.replayedAt
        ? el('span', {}, 'replayed ', timeAgo(letter.replayedAt))
        : letter.replayRequestedAt
          ? el('span', {}, 'requested ', timeAgo(letter.replayRequestedAt), ', not done yet')
          : 'not replayed';
      return [
        facts([
          ['Event', el('span', { class: 'mono', text: `${letter.eventId} (${letter.type})` })],
          ['Stream', el('span', { class: 'mono', text: letter.streamId ?? '—' })],
          ['Appended', clockTime(letter.eventCreatedAt)],
          [
            'Why',
            letter.reason === 'operator-skip' ? 'skipped by an operator' : 'skipped by skipApplyErrors',
          ],
          ['Attempts', String(letter.attempts ?? '—')],
          ['Dead since', el('span', {}, clockTime(letter.createdAt), ' (', timeAgo(letter.createdAt), ')')],
          ['Replay', replay],
        ]),
        el('h3', { text: 'Error' }),
        el('pre', { class: 'error-full', text: letter.error ?? 'none recorded' }),
        el('p', { class: 'hint', text: REDACTION_NOTE }),
        json('Data', letter.data, 'data'),
        json('Metadata', letter.metadata, 'metadata'),
      ];
    },
    'dead-letter',
  );
}

/**
 * The events a consumer set aside under one parked key, in id order: the order a replay delivers
 * them in. The first one carries the error that parked the key.
 * @param {ConsumerSummary} c @param {string} key @param {HTMLElement | null} from
 */
export function openParkedEventsPayload(c, key, from) {
  open(
    `Parked events of key ${JSON.stringify(key)} of ${c.name}`,
    from,
    async () => {
      const query = new URLSearchParams({ key, limit: String(PARKED_LIMIT) }).toString();
      const answer = await api('GET', consumerPath(c, `/parked-keys/events?${query}`));
      const events = Array.isArray(answer) ? /** @type {import('./types.js').ParkedEvent[]} */ (answer) : [];
      /** @type {Node[]} */
      const nodes = [
        facts([
          ['Key', el('span', { class: 'mono', text: key === '' ? '(empty key)' : key })],
          [
            'Events',
            events.length >= PARKED_LIMIT
              ? `the first ${PARKED_LIMIT}, in id order (the order a replay delivers them in)`
              : `${plural(events.length, 'event')}, in id order (the order a replay delivers them in)`,
          ],
        ]),
        el('p', { class: 'hint', text: REDACTION_NOTE }),
      ];
      for (const event of events) {
        nodes.push(
          el(
            'section',
            { class: 'parked-event', 'data-parked-event': event.eventId },
            el('h3', { class: 'mono', text: `Event ${event.eventId} (${event.type})` }),
            facts([
              ['Stream', el('span', { class: 'mono', text: event.streamId })],
              ['Appended', clockTime(event.eventCreatedAt)],
              ['Parked', el('span', {}, clockTime(event.parkedAt), ' (', timeAgo(event.parkedAt), ')')],
              [
                'Why',
                event.error
                  ? 'its failure parked the key'
                  : 'set aside behind an earlier event of the parked key',
              ],
            ]),
            event.error ? el('pre', { class: 'error-full', text: event.error }) : null,
            json('Data', event.data, 'data'),
            json('Metadata', event.metadata, 'metadata'),
          ),
        );
      }
      return nodes;
    },
    'parked-events',
  );
}

/** Wires the dialog's close button; once, at start. */
export function setUpPayloadDialog() {
  byId('payload-close', HTMLButtonElement).addEventListener('click', () => dialog().close());
  dialog().addEventListener('close', () => {
    const from = opener;
    opener = null;
    byId('payload-body', HTMLElement).replaceChildren();
    restoreFocus(from);
    modalClosed();
  });
}

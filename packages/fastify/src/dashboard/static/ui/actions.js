// @ts-check
// The operator actions: each opens the confirmation dialog, and on Confirm posts to its ops route.
import { api, consumerPath, describeError, instanceBody, queryOf } from './api.js';
import { field, linkChoice, openDialog, radioGroup, setDialogError } from './dialog.js';
import { el } from './dom.js';
import { labelOf, plural, truncate } from './format.js';
import { actionLabel, isStuck, laneLabel } from './policy.js';
import { DEAD_LETTER_LIMIT } from './state.js';

/** @typedef {import('./types.js').ConsumerSummary} ConsumerSummary */
/** @typedef {import('./types.js').ActionResult} ActionResult */

const ID_PATTERN = '[1-9][0-9]{0,18}';

/** What an action did to the cursor and the status, in words. @param {ActionResult} r */
function movement(r) {
  const parts = [];
  if (r.cursorBefore !== r.cursorAfter) parts.push(`cursor ${r.cursorBefore} → ${r.cursorAfter}`);
  else parts.push(`cursor ${r.cursorAfter}`);
  if (r.statusBefore && r.statusAfter && r.statusBefore !== r.statusAfter) {
    parts.push(`status ${r.statusBefore} → ${r.statusAfter}`);
  } else if (r.statusAfter) parts.push(`status ${r.statusAfter}`);
  return parts.join(', ');
}

/** @param {string} path @param {object} body */
async function post(path, body) {
  return /** @type {ActionResult} */ (await api('POST', path, body));
}

/** @param {ConsumerSummary} c @param {HTMLElement} opener */
export function restartAction(c, opener) {
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
    validate: () => {
      const choice = group.selected();
      if (choice === null) return 'Choose where to restart from.';
      if (choice === 'id' && !/^[0-9]{1,19}$/.test(idField.input.value.trim())) {
        return 'The event id must be digits only.';
      }
      return null;
    },
    onConfirm: async (extra) => {
      const choice = group.selected();
      const from = choice === 'id' ? idField.input.value.trim() : (choice ?? 'now');
      const r = await post(consumerPath(c, '/restart'), { from, ...instanceBody(c), ...extra });
      return `Restarted ${label} from ${from}: ${movement(r)}.`;
    },
  });
}

/** @param {ConsumerSummary} c @param {HTMLElement} opener */
export function disableAction(c, opener) {
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
    validate: () => {
      if (group.selected() !== 'custom') return null;
      const count = Number(minutes.input.value);
      return Number.isInteger(count) && count >= 1 && count <= 525600
        ? null
        : 'Give a whole number of minutes, from 1 to 525600.';
    },
    onConfirm: async (extra) => {
      const choice = group.selected();
      /** @type {Record<string, unknown>} */
      const body = { ...instanceBody(c), ...extra };
      let span = 'until enabled again';
      if (choice !== 'forever') {
        const count = choice === 'custom' ? Number(minutes.input.value) : Number(choice);
        const forMs = Math.round(count * 60000);
        body['forMs'] = forMs;
        span = `for ${plural(count, 'minute')} (until ${new Date(Date.now() + forMs).toLocaleTimeString()})`;
      }
      const r = await post(consumerPath(c, '/disable'), body);
      return `Disabled ${label} ${span}: ${movement(r)}.`;
    },
  });
}

/** @param {ConsumerSummary} c @param {HTMLElement} opener */
export function enableAction(c, opener) {
  const label = labelOf(c);
  const description =
    c.status === 'dead'
      ? `Re-arms it by hand: the next turn retries event ${c.stuckEventId ?? '?'} with fresh attempts.`
      : 'Resumes its turns from its cursor.';
  const verb = actionLabel('enable', c);
  openDialog({
    title: `${verb} ${label}`,
    description,
    confirmLabel: verb,
    opener,
    onConfirm: async (extra) => {
      const r = await post(consumerPath(c, '/enable'), { ...instanceBody(c), ...extra });
      return `${c.status === 'dead' ? 'Re-armed' : 'Enabled'} ${label}: ${movement(r)}.`;
    },
  });
}

/** @param {ConsumerSummary} c @param {HTMLElement} opener */
export function skipAction(c, opener) {
  if (!isStuck(c) || !c.stuckEventId) return;
  const label = labelOf(c);
  const stuck = c.stuckEventId;
  const eventId = field(
    { id: 'skip-event-id', inputmode: 'numeric', pattern: ID_PATTERN, required: true, value: stuck },
    'Event id',
    'Only the event the consumer is stuck on can be skipped; the server refuses any other.',
  );
  openDialog({
    title: `Skip an event of ${label}`,
    description:
      `Event ${stuck} is copied to the dead letters and the next turn passes it without calling ` +
      `the handler${c.lastError ? ` (last error: ${truncate(c.lastError, 160)})` : ''}.`,
    fields: [eventId.node],
    confirmLabel: 'Skip event',
    danger: true,
    opener,
    onConfirm: async (extra) => {
      const id = eventId.input.value.trim();
      const r = await post(consumerPath(c, '/skip'), { eventId: id, ...instanceBody(c), ...extra });
      return `Skipped event ${r.eventId ?? id} of ${label}; it is in the dead letters (${movement(r)}).`;
    },
  });
}

/**
 * Counts first (a dry run), then asks for exactly the counted dead letters to be replayed.
 * @param {ConsumerSummary} c @param {HTMLElement} opener @param {string[]} [ids]
 */
export function replayAction(c, opener, ids) {
  const label = labelOf(c);
  /** @type {string[]} */
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
        (result) => {
          const r = /** @type {import('./types.js').ReplayResult} */ (result);
          counted = r.deadLetterIds;
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
        (/** @type {unknown} */ error) => {
          ready('The dry run failed: nothing can be replayed from here.', false);
          setDialogError(`Counting failed: ${describeError(error)}`);
        },
      );
    },
    onConfirm: async (extra) => {
      const r = /** @type {import('./types.js').ReplayResult} */ (
        await api('POST', consumerPath(c, '/dead-letters/replay'), {
          ids: counted,
          ...instanceBody(c),
          ...extra,
        })
      );
      return (
        `Replay requested for ${plural(r.count, 'dead letter')} of ${label} ` +
        `(ids ${truncate(r.deadLetterIds.join(', '), 200)}): delivered on its next turn.`
      );
    },
  });
}

/** `11` or `11–15`. @param {import('./types.js').GapRange} g */
function rangeText(g) {
  return g.from === g.to ? g.from : `${g.from}–${g.to}`;
}

/**
 * Fences one pending gap id: the operator picks a range from the consumer's pending gaps, then an
 * id inside it (its first id to begin with).
 * @param {ConsumerSummary} c @param {HTMLElement} opener
 */
export function fenceAction(c, opener) {
  const label = labelOf(c);
  const rangeId = 'fence-range';
  const select = el(
    'select',
    { id: rangeId, disabled: true },
    el('option', { text: 'Loading the pending gaps…' }),
  );
  const gapId = field(
    { id: 'fence-event-id', inputmode: 'numeric', pattern: ID_PATTERN, required: true, disabled: true },
    'Gap id to fence',
    'Loading the pending gaps…',
  );
  /** @type {import('./types.js').GapRange[]} */
  let gaps = [];
  const chosen = () => gaps[Number(select.value)];
  const sync = () => {
    const range = chosen();
    if (!range) return;
    gapId.input.value = range.from;
    if (gapId.hint)
      gapId.hint.textContent =
        range.from === range.to
          ? `The range holds one id, ${range.from}.`
          : `Any id from ${range.from} to ${range.to}.`;
  };
  select.addEventListener('change', sync);
  openDialog({
    title: `Fence a gap of ${label}`,
    description:
      'Gives up one pending gap id for good: a tombstone takes the id, so a late writer fails on the key ' +
      'instead of its event being skipped silently. Refused while a transaction still owns the id.',
    fields: [
      el('div', { class: 'field' }, el('label', { for: rangeId, text: 'Pending gap' }), select),
      gapId.node,
    ],
    confirmLabel: 'Fence gap id',
    danger: true,
    opener,
    prepare: (ready) => {
      api('GET', consumerPath(c, queryOf(c))).then(
        (detail) => {
          gaps = /** @type {import('./types.js').ConsumerDetail} */ (detail).gaps ?? [];
          if (gaps.length === 0) {
            select.replaceChildren(el('option', { text: 'none' }));
            if (gapId.hint) gapId.hint.textContent = 'No pending gap right now.';
            ready('No pending gap right now: nothing to fence.', false);
            return;
          }
          select.replaceChildren(
            ...gaps.map((g, i) => {
              const count = BigInt(g.to) - BigInt(g.from) + 1n;
              return el('option', { value: i, text: `${rangeText(g)} (${plural(count.toString(), 'id')})` });
            }),
          );
          select.disabled = false;
          gapId.input.disabled = false;
          sync();
          ready(
            `${plural(gaps.length, 'pending range')}${gaps.length >= 100 ? ' (the first 100)' : ''}. ` +
              'Gives up one id for good: a tombstone takes it, so a late writer fails on the key instead of ' +
              'its event being skipped silently. Refused while a transaction still owns the id.',
            true,
          );
        },
        (/** @type {unknown} */ error) => {
          ready('The pending gaps could not be loaded: nothing can be fenced from here.', false);
          setDialogError(describeError(error));
        },
      );
    },
    validate: () => {
      const range = chosen();
      const id = gapId.input.value.trim();
      if (!range) return 'Choose a pending gap.';
      if (!/^[1-9][0-9]{0,18}$/.test(id)) return 'The gap id must be digits only.';
      const n = BigInt(id);
      return n >= BigInt(range.from) && n <= BigInt(range.to)
        ? null
        : `Id ${id} is not in the pending range ${rangeText(range)}.`;
    },
    onConfirm: async (extra) => {
      const id = gapId.input.value.trim();
      const r = await post(consumerPath(c, '/fence'), { eventId: id, ...instanceBody(c), ...extra });
      return `Fenced gap id ${r.eventId ?? id} of ${label}: a tombstone now holds it (${movement(r)}).`;
    },
  });
}

/** `"s-1"`, or `the empty key` (a laneKey field an event did not have). @param {string} key */
function keyText(key) {
  return key === '' ? 'the empty key' : JSON.stringify(truncate(key, 120));
}

/** @param {string} path @param {object} body */
async function postKey(path, body) {
  return /** @type {import('./types.js').ParkedKeyResult} */ (await api('POST', path, body));
}

/**
 * Replays a parked key (docs/design.md §11.4): the lane that owns it delivers its events again, in
 * order, on its next turn.
 * @param {ConsumerSummary} c @param {string} key @param {number | null} events @param {HTMLElement} opener
 */
export function replayKeyAction(c, key, events, opener) {
  const count = events === null ? 'Its parked events' : `Its ${plural(events, 'parked event')}`;
  openDialog({
    title: `Replay parked key ${keyText(key)} of ${c.name}`,
    description:
      `${count} are delivered again through the handler, in id order, one attempt each, by the next turn ` +
      'of the lane that owns the key. Once they have all gone through, the key is no longer parked and ' +
      'its later events flow as usual; one that fails again parks the key again from that event on.',
    confirmLabel: 'Replay key',
    opener,
    onConfirm: async (extra) => {
      const r = await postKey(consumerPath(c, '/parked-keys/replay'), { key, ...extra });
      const lane = laneLabel({ instanceId: r.lane });
      return (
        `Replay requested for key ${keyText(key)} of ${c.name} (${plural(r.events, 'parked event')}): ` +
        `delivered on the next turn of ${lane ?? 'the consumer'}.`
      );
    },
  });
}

/**
 * Drops a parked key: its parked events are deleted without being delivered, and its later
 * events flow again.
 * @param {ConsumerSummary} c @param {string} key @param {number | null} events @param {HTMLElement} opener
 */
export function dropKeyAction(c, key, events, opener) {
  const count = events === null ? 'Its parked events' : `Its ${plural(events, 'parked event')}`;
  openDialog({
    title: `Drop parked key ${keyText(key)} of ${c.name}`,
    description:
      `${count} are deleted and never delivered; the key is no longer parked, so its later events ` +
      'flow again. The audit keeps the count, not the events.',
    confirmLabel: 'Drop key',
    danger: true,
    opener,
    onConfirm: async (extra) => {
      const r = await postKey(consumerPath(c, '/parked-keys/drop'), { key, ...extra });
      return `Dropped key ${keyText(key)} of ${c.name}: ${plural(r.events, 'parked event')} deleted.`;
    },
  });
}

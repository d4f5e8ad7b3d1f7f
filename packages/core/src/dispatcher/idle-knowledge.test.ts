// What a process may skip between passes, and every event that takes that knowledge back.
import { describe, expect, test } from 'vitest';
import type { ResolvedConsumer } from '../options.js';
import type { Precheck, PrecheckRow } from '../queries/consumers.js';
import { EMPTY_NOTIFY_PASSES, IdleKnowledge } from './idle-check.js';
import type { PassResult } from './pass.js';

const consumers = ['a', 'b'].map((name) => ({ name, unit: name }) as ResolvedConsumer);
const POLL_MS = 1_000;

function row(fields: Partial<PrecheckRow>): PrecheckRow {
  return {
    status: 'idle',
    attempts: 0,
    gap_count: 0,
    skip_event_id: null,
    replays_pending: false,
    start_fence: null,
    cursor: '5',
    head: '9',
    ...fields,
  } as PrecheckRow;
}

function precheck(rows: Record<string, PrecheckRow>, quiet: string[] = []): Precheck {
  return {
    quiet: new Set(quiet),
    rows: new Map(Object.entries(rows)),
    lanes: new Map(),
    dispatchers: null,
    snapshot: '10:10:',
    head: '9',
  };
}

const RESULT: PassResult = { processed: 0, failed: 0, byConsumer: {} };

describe('IdleKnowledge', () => {
  test('a pre-check finding every consumer plain lets local wake-ups skip the next one, for a poll interval', () => {
    const known = new IdleKnowledge();
    expect(known.canSkipPrecheck('local', 0, POLL_MS)).toBe(false);
    known.precheckRead(precheck({ a: row({}) }, ['b']), consumers, 100);
    expect(known.canSkipPrecheck('local', 100 + POLL_MS - 1, POLL_MS)).toBe(true);
    expect(known.canSkipPrecheck('local', 100 + POLL_MS, POLL_MS)).toBe(false);
    // A tick that finds the cluster unchanged renews it.
    known.precheckStands(100 + POLL_MS);
    expect(known.canSkipPrecheck('local', 100 + 2 * POLL_MS - 1, POLL_MS)).toBe(true);
  });

  test('the cursors come from the pre-check: a row without gaps, or the head for a quiet consumer', () => {
    const known = new IdleKnowledge();
    known.precheckRead(precheck({ a: row({ cursor: '7' }) }, ['b']), consumers, 0);
    expect(known.cursorOf('a')).toBe(7n);
    expect(known.cursorOf('b')).toBe(9n);
    known.precheckRead(precheck({ a: row({ gap_count: 1 }) }), consumers, 0);
    expect(known.cursorOf('a')).toBeUndefined();
    expect(known.cursorOf('b')).toBeUndefined(); // no row, not quiet: missing
  });

  test.each([
    ['a failed attempt', { attempts: 1 }],
    ['a pending gap', { gap_count: 1 }],
    ['an operator skip', { skip_event_id: '6' }],
    ['a replay asked for', { replays_pending: true }],
    ['a start fence', { start_fence: '100' }],
    ['a dead consumer', { status: 'dead' as const }],
    ['a disabled consumer', { status: 'disabled' as const }],
  ])('%s is not plain: wake-ups pre-check', (_what, fields) => {
    const known = new IdleKnowledge();
    known.precheckRead(precheck({ a: row(fields) }, ['b']), consumers, 0);
    expect(known.canSkipPrecheck('local', 1, POLL_MS)).toBe(false);
  });

  test('a missing row, a failed pre-check, a turn that found something, or a forgotten consumer take it back', () => {
    const plainKnown = () => {
      const known = new IdleKnowledge();
      known.precheckRead(precheck({ a: row({}) }, ['b']), consumers, 0);
      expect(known.canSkipPrecheck('local', 1, POLL_MS)).toBe(true);
      return known;
    };
    const missing = new IdleKnowledge();
    missing.precheckRead(precheck({ a: row({}) }), consumers, 0);
    expect(missing.canSkipPrecheck('local', 1, POLL_MS)).toBe(false);

    const failed = plainKnown();
    failed.precheckFailed();
    expect(failed.canSkipPrecheck('local', 1, POLL_MS)).toBe(false);
    expect(failed.standing).toBeUndefined();

    const unusual = plainKnown();
    unusual.turnEnded('a', undefined, false);
    expect(unusual.canSkipPrecheck('local', 1, POLL_MS)).toBe(false);
    expect(unusual.cursorOf('a')).toBeUndefined();

    const usual = plainKnown();
    usual.turnEnded('a', 9n, true);
    expect(usual.canSkipPrecheck('local', 1, POLL_MS)).toBe(true);
    expect(usual.cursorOf('a')).toBe(9n);

    const forgotten = plainKnown();
    forgotten.forget('b');
    expect(forgotten.canSkipPrecheck('local', 1, POLL_MS)).toBe(false);
    expect(forgotten.cursorOf('b')).toBeUndefined();
  });

  test('a pre-check stands only when no row needs the clock to be judged', () => {
    const known = new IdleKnowledge();
    const caughtUp = precheck({ a: row({ cursor: '9' }) }, ['b']);
    known.precheckRead(caughtUp, consumers, 0);
    expect(known.standing).toBe(caughtUp);
    known.precheckRead(precheck({ a: row({ cursor: '9', attempts: 1 }) }), consumers, 0);
    expect(known.standing).toBeUndefined();
    known.precheckRead(precheck({ a: row({ cursor: '5' }) }), consumers, 0);
    expect(known.standing).toBeUndefined();
  });

  test('an all-idle result is reused only on the pre-check it was judged on', () => {
    const known = new IdleKnowledge();
    const first = precheck({}, ['a', 'b']);
    known.passJudged(first, RESULT);
    expect(known.allIdleOn(first)).toBe(RESULT);
    expect(known.allIdleOn(precheck({}, ['a', 'b']))).toBeUndefined();
    expect(known.allIdleOn(undefined)).toBeUndefined();
    known.passJudged(undefined, undefined);
    expect(known.allIdleOn(first)).toBeUndefined();
  });

  test('NOTIFY wake-ups skip the pre-check that many times without a delivery, then pre-check until a turn delivers', () => {
    const known = new IdleKnowledge();
    known.precheckRead(precheck({ a: row({}) }, ['b']), consumers, 0);
    for (let i = 0; i < EMPTY_NOTIFY_PASSES; i++) {
      expect(known.canSkipPrecheck('notify', 1, POLL_MS)).toBe(true);
      known.notifySkippedPrecheck();
    }
    // A flood of forged NOTIFYs: lock-free pre-checks from here on; this process's commits still skip.
    expect(known.canSkipPrecheck('notify', 1, POLL_MS)).toBe(false);
    expect(known.canSkipPrecheck('local', 1, POLL_MS)).toBe(true);
    known.delivered();
    expect(known.canSkipPrecheck('notify', 1, POLL_MS)).toBe(true);
  });
});

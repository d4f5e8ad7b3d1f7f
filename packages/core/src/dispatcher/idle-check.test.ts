// A pre-check stands for the next ones while the snapshot does not change only if no row in it is
// judged by the clock (dispatcher/idle-check.ts, canStand).
import { expect, test } from 'vitest';
import type { Precheck, PrecheckRow } from '../queries/consumers.js';
import { canStand } from './idle-check.js';

const NOW = new Date('2026-11-30T12:00:00Z');

/** A consumer at the head (10) with one fenced gap, as the pre-check returns it. */
function row(changes: Partial<PrecheckRow> = {}): PrecheckRow {
  return {
    name: 'c',
    instance_id: '*',
    status: 'idle',
    cursor: '10',
    attempts: 0,
    stuck_event_id: null,
    skip_event_id: null,
    replays_pending: false,
    rearm_count: 0,
    last_error: null,
    last_error_at: null,
    failure_category: null,
    updated_at: NOW,
    disabled_until: null,
    gap_count: 1,
    gaps_unfenced: 0,
    gap_min_fence: '900',
    gap_watch: '',
    gaps_recheck: false,
    oldest_gap_at: new Date(NOW.getTime() - 5_000),
    start_fence: null,
    start_upto: null,
    start_after: null,
    start_snapshot: null,
    system_identifier: null,
    last_progress_at: NOW,
    version: null,
    lane_key: null,
    head: '10',
    snapshot: '800:905:800',
    now: NOW,
    lag_seconds: null,
    lane_changing: false,
    parked_replays: false,
    waits_at_hole: false,
    ...changes,
  };
}

const precheckOf = (...rows: PrecheckRow[]): Precheck => ({
  quiet: new Set(['q']),
  rows: new Map(rows.map((r, i) => [`c${i}`, r])),
  lanes: new Map(),
  dispatchers: null,
  snapshot: '800:905:800',
  head: '10',
});

test('a pre-check of caught-up consumers, with or without held gaps, stands while nothing commits', () => {
  expect(canStand(precheckOf())).toBe(true);
  expect(canStand(precheckOf(row(), row({ status: 'processing' })))).toBe(true);
});

test('a pre-check with a row the clock decides about does not stand', () => {
  const clockBound: Partial<PrecheckRow>[] = [
    { status: 'dead', attempts: 5, stuck_event_id: '7' }, // re-armed after a cooldown
    { status: 'disabled', disabled_until: new Date(NOW.getTime() + 1_000) }, // re-enabled at a time
    { attempts: 1, stuck_event_id: '7', last_error_at: NOW }, // retried after a delay
    { cursor: '9' }, // behind: its lag in seconds grows
  ];
  for (const changes of clockBound) expect(canStand(precheckOf(row(), row(changes)))).toBe(false);
});

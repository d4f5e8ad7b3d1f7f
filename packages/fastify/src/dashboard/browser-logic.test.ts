// The dashboard's DOM-free modules, run in Node: which actions a consumer row offers, when its last
// error counts as past, how lane rows, lane changes and parked keys read, the lag and throughput
// samples behind the charts, and what the Rebuilds panel offers and says.
import { describe, expect, test } from 'vitest';
import { visible } from './static/ui/visible.js';
import { History, HISTORY_MS, slices, spanOf, summarize } from './static/ui/history.js';
import {
  actionLabel,
  applicableActions,
  errorState,
  isRetrying,
  isStuck,
  laneChangeNote,
  laneLabel,
  laneOf,
  parkedKeyCount,
  totalParkedKeys,
} from './static/ui/policy.js';
import {
  approveWithin,
  behind,
  describeChange,
  progressPercent,
  rebuildActions,
  takeoverNote,
  versionsNote,
} from './static/ui/rebuild-policy.js';
import type { ConsumerSummary, RebuildProgress, RebuildStatus, VersionRow } from './static/ui/types.js';

function row(fields: Partial<ConsumerSummary> = {}): ConsumerSummary {
  return {
    name: 'mailer',
    instanceId: '*',
    status: 'idle',
    cursor: '10',
    head: '10',
    lagEvents: '0',
    pendingGaps: 0,
    attempts: 0,
    deadLetters: 0,
    ...fields,
  };
}

describe('actions offered', () => {
  test('a healthy consumer: Disable and Restart only', () => {
    expect(applicableActions(row())).toEqual(['disable', 'restart']);
    expect(applicableActions(row({ status: 'processing', lagEvents: '5' }))).toEqual(['disable', 'restart']);
  });

  test('Enable only when disabled, Re-arm (the same request) only when dead; Disable only when not disabled', () => {
    const disabled = row({ status: 'disabled' });
    expect(applicableActions(disabled)).toEqual(['enable', 'restart']);
    expect(actionLabel('enable', disabled)).toBe('Enable');
    const dead = row({ status: 'dead', attempts: 3, stuckEventId: '11' });
    expect(applicableActions(dead)).toEqual(['skip', 'enable', 'disable', 'restart']);
    expect(actionLabel('enable', dead)).toBe('Re-arm');
    expect(actionLabel('skip', dead)).toBe('Skip');
  });

  test('retrying is what the row says: attempts on record, and neither dead nor disabled', () => {
    expect(isRetrying(row({ attempts: 2 }))).toBe(true);
    expect(isRetrying(row({ attempts: 2, status: 'dead' }))).toBe(false);
    expect(isRetrying(row({ attempts: 2, status: 'disabled' }))).toBe(false);
    expect(isRetrying(row({ attempts: 0 }))).toBe(false);
  });

  test('bidirectional overrides and isolates are shown escaped, not obeyed', () => {
    expect(visible('\u202eevil \u2066x\u2069 ok')).toBe('\\u202eevil \\u2066x\\u2069 ok');
    expect(visible('plain ü 名')).toBe('plain ü 名');
  });

  test('Skip only while stuck: retrying or dead on an event', () => {
    const retrying = row({ attempts: 1, stuckEventId: '11' });
    expect(isStuck(retrying)).toBe(true);
    expect(applicableActions(retrying)).toEqual(['skip', 'disable', 'restart']);
    // A stuck id left with no attempt and not dead: the server would refuse a skip.
    expect(isStuck(row({ stuckEventId: '11' }))).toBe(false);
    expect(applicableActions(row({ stuckEventId: '11' }))).not.toContain('skip');
    // Disabled while stuck: it can still be skipped and enabled.
    expect(applicableActions(row({ status: 'disabled', attempts: 2, stuckEventId: '11' }))).toEqual([
      'skip',
      'enable',
      'restart',
    ]);
  });

  test('Replay only with dead letters waiting, Fence only with pending gaps', () => {
    expect(applicableActions(row({ deadLetters: 2 }))).toEqual(['disable', 'replay', 'restart']);
    expect(applicableActions(row({ pendingGaps: 1 }))).toEqual(['disable', 'fence', 'restart']);
  });
});

describe('last error', () => {
  test('none, current, or resolved as the server says', () => {
    expect(errorState(row())).toBe('none');
    expect(errorState(row({ lastError: 'boom', lastErrorAt: '2025-01-01T00:00:00Z' }))).toBe('current');
    expect(
      errorState(
        row({
          lastError: 'boom',
          lastErrorAt: '2025-01-01T00:00:00Z',
          lastErrorResolvedAt: '2025-01-01T00:01:00Z',
        }),
      ),
    ).toBe('resolved');
  });
});

describe('lanes and parked keys', () => {
  test('a lane row reads as "lane k of N", from the server\'s lane or its instance id', () => {
    expect(laneLabel(row({ instanceId: '*1/3', lane: { index: 1, count: 3 } }))).toBe('lane 1 of 3');
    expect(laneLabel(row({ instanceId: '*0/16' }))).toBe('lane 0 of 16');
    expect(laneOf(row({ instanceId: '*15/16' }))).toEqual({ index: 15, count: 16 });
    // One lane, a per-instance row, and instance ids that only look like lanes: no lane.
    expect(laneLabel(row({ instanceId: '*', lane: { index: 0, count: 1 } }))).toBeNull();
    expect(laneLabel(row({ instanceId: 'web-1', lane: null }))).toBeNull();
    for (const instanceId of ['*3/3', '*01/3', '*1/3x', '1/3', '*-1/3', '*1/0']) {
      expect(laneOf(row({ instanceId })), instanceId).toBeNull();
    }
  });

  test('a lane change in progress is a note with its counts and barrier', () => {
    expect(laneChangeNote(row())).toBeNull();
    expect(laneChangeNote(row({ laneChange: null }))).toBeNull();
    expect(laneChangeNote(row({ laneChange: { from: 4, to: 16, barrier: '1234', switched: false } }))).toBe(
      're-laning 4 → 16, barrier 1234',
    );
    expect(
      laneChangeNote(row({ laneChange: { from: 4, to: 16, barrier: '9007199254740993', switched: true } })),
    ).toBe('re-laning 4 → 16, barrier 9007199254740993, switched: old lanes draining');
  });

  test('parked keys are counted once per consumer, however many lane rows it has', () => {
    expect(parkedKeyCount(row())).toBe(0);
    expect(parkedKeyCount(row({ parkedKeys: 2 }))).toBe(2);
    expect(parkedKeyCount(row({ parkedKeys: -1 }))).toBe(0);
    const lanes = ['*0/3', '*1/3', '*2/3'].map((instanceId) =>
      row({ name: 'reactor', instanceId, parkedKeys: 2 }),
    );
    expect(totalParkedKeys([...lanes, row({ name: 'mailer', parkedKeys: 1 }), row({ name: 'feed' })])).toBe(
      3,
    );
    expect(totalParkedKeys([])).toBe(0);
  });

  test('parked keys are not an action of the row: the write actions stay as they were', () => {
    expect(applicableActions(row({ instanceId: '*1/3', parkedKeys: 4 }))).toEqual(['disable', 'restart']);
  });
});

describe('lag and throughput samples', () => {
  test('throughput is the ids the cursor passed per second between two polls; a restart starts afresh', () => {
    const history = new History();
    history.record('k', 1_000, '100', '5');
    history.record('k', 3_000, '110', '3');
    history.record('k', 5_000, '110', '0');
    history.record('k', 7_000, '20', '90'); // restarted from 20
    history.record('k', 9_000, '30', '80');
    expect(history.samples('k').map((s) => [s.lag, s.rate])).toEqual([
      [5, null],
      [3, 5],
      [0, 0],
      [90, null],
      [80, 5],
    ]);
    // Cursors beyond 2^53 are subtracted exactly.
    history.record('big', 0, '9007199254740993', '0');
    history.record('big', 1_000, '9007199254740995', '0');
    expect(history.samples('big')[1]?.rate).toBe(2);
    // A poll answered out of order (an earlier time) is ignored.
    history.record('k', 8_000, '25', '85');
    expect(history.samples('k')).toHaveLength(5);
  });

  test('keeps the last 15 minutes, forgets gone consumers, and survives a save and restore', () => {
    const history = new History();
    history.record('a', 0, '1', '0');
    history.record('a', HISTORY_MS, '2', '0');
    history.record('a', HISTORY_MS + 1, '3', '0');
    expect(history.samples('a').map((s) => s.t)).toEqual([HISTORY_MS, HISTORY_MS + 1]);
    history.record('b', HISTORY_MS, '1', '0');
    history.keepOnly(new Set(['a']));
    expect(history.samples('b')).toEqual([]);

    const restored = new History();
    restored.restore(JSON.parse(JSON.stringify(history.save())), HISTORY_MS + 10);
    expect(restored.samples('a')).toEqual(history.samples('a'));
    // Too old, in the future or malformed: dropped.
    const junk = new History();
    junk.restore(
      {
        a: [{ t: 0, lag: 1, cursor: '1', rate: null }],
        b: [{ t: HISTORY_MS * 3, lag: 1, cursor: '1', rate: null }],
        c: [{ t: HISTORY_MS, lag: 'x', cursor: '1', rate: null }],
        d: [{ t: HISTORY_MS, lag: 1, cursor: '1; drop', rate: null }],
        e: 'nonsense',
      },
      HISTORY_MS * 2,
    );
    expect([...junk.byKey.keys()]).toEqual([]);
  });

  test('charts span since the oldest sample, in nice steps up to 15 minutes, sliced for drawing', () => {
    const at = (minutes: number) => minutes * 60_000;
    expect(spanOf([], at(10))).toEqual({ spanMs: at(1), ticks: ['1 min ago', '30 s', 'now'] });
    const history = new History();
    for (let s = 0; s <= 150; s += 2) history.record('k', s * 1000, String(s), String(s % 7));
    const samples = history.samples('k');
    expect(spanOf(samples, at(2.5))).toEqual({
      spanMs: at(3),
      ticks: ['3 min ago', '2 min', '1 min', 'now'],
    });
    expect(spanOf(samples, at(40)).ticks).toEqual(['15 min ago', '10 min', '5 min', 'now']);

    const { lag, rate } = slices(samples, at(2.5), at(3), 90);
    expect(lag).toHaveLength(90);
    // The first 30 s of the 3 minutes are before the first sample.
    expect(lag.slice(0, 15).every((v) => v === null)).toBe(true);
    expect(Math.max(...lag.map((v) => v ?? 0))).toBe(6);
    expect(rate.filter((v) => v !== null).every((v) => Math.abs(v - 1) < 1e-9)).toBe(true);
    expect(summarize(samples)).toMatchObject({ count: 76, lagPeak: 6, rateNow: 1, ratePeak: 1 });
  });
});

describe('rebuilds', () => {
  function rebuild(fields: Partial<RebuildProgress> = {}): RebuildProgress {
    return {
      consumer: 'stats',
      liveVersion: 1,
      version: 2,
      state: 'rebuilding',
      sideEffects: false,
      position: '200',
      startPosition: '0',
      head: '1300',
      lagEvents: '1100',
      ratePerSecond: 50,
      etaSeconds: 22,
      progress: 200 / 1300,
      barrier: null,
      takeoverWithin: null,
      startedAt: '2026-01-01T00:00:00.000Z',
      ...fields,
    };
  }
  function version(v: number, state: VersionRow['state']): VersionRow {
    return {
      consumerName: 'stats',
      version: v,
      state,
      rowName: v === 1 ? 'stats' : `stats@v${v}`,
      sideEffects: false,
      startPosition: '0',
      createdAt: '2026-01-01T00:00:00.000Z',
    };
  }

  test('the actions that apply in each state; none once live or done with', () => {
    expect(rebuildActions(rebuild())).toEqual(['approve', 'pause', 'abandon']);
    expect(rebuildActions(rebuild({ state: 'paused' }))).toEqual(['resume', 'abandon']);
    expect(rebuildActions(rebuild({ state: 'waiting', sideEffects: true, position: null }))).toEqual([
      'approve',
      'abandon',
    ]);
    expect(rebuildActions(rebuild({ state: 'taking-over', barrier: '1300' }))).toEqual(['abandon']);
    for (const state of ['live', 'retired', 'abandoned', 'dropped'] as const) {
      expect(rebuildActions(rebuild({ state }))).toEqual([]);
    }
  });

  test('progress rounds down and says 100% only at the head; none with side effects', () => {
    expect(progressPercent(rebuild())).toBe(15);
    expect(progressPercent(rebuild({ progress: 0.999, lagEvents: '1' }))).toBe(99);
    expect(progressPercent(rebuild({ progress: 1, lagEvents: '3' }))).toBe(99);
    expect(progressPercent(rebuild({ progress: 1, lagEvents: '0', position: '1300' }))).toBe(100);
    expect(progressPercent(rebuild({ progress: 0 }))).toBe(0);
    expect(progressPercent(rebuild({ progress: null, position: null, lagEvents: null }))).toBeNull();
    expect(behind(rebuild({ lagEvents: null }))).toBe(1100n);
    expect(behind(rebuild({ lagEvents: null, position: null }))).toBeNull();
  });

  test('the takeover note: ready to approve within its distance, needs force beyond it, automatic when declared', () => {
    expect(approveWithin(rebuild())).toBe(1000n);
    expect(takeoverNote(rebuild())).toBe(
      'Approve once it is within 1000 events of the head (an approval before needs force).',
    );
    expect(takeoverNote(rebuild({ lagEvents: '1000' }))).toBe(
      'Within 1000 events of the head: ready to approve.',
    );
    expect(approveWithin(rebuild({ takeoverWithin: '5' }))).toBe(5n);
    expect(takeoverNote(rebuild({ takeoverWithin: '5' }))).toBe(
      'Takes over by itself once within 5 events of the head.',
    );
    expect(takeoverNote(rebuild({ takeoverWithin: '1', lagEvents: '1' }))).toBe(
      'Within 1 event of the head: it takes over by itself.',
    );
    expect(takeoverNote(rebuild({ state: 'taking-over', barrier: '1300' }))).toBe(
      'Taking over: version 1 stopped at event 1300; version 2 becomes live once it has reached it with no pending gap below.',
    );
    expect(takeoverNote(rebuild({ state: 'waiting', sideEffects: true, position: null }))).toMatch(
      /^Has side effects, so it is not rebuilt: once approved it takes the rows over where version 1 is/,
    );
    expect(takeoverNote(rebuild({ state: 'paused' }))).toMatch(/^Paused/);
  });

  test("a consumer's versions read as a short note only while a retired one keeps its data", () => {
    const status = (versions: VersionRow[]): RebuildStatus => ({
      consumer: 'stats',
      versions,
      rebuild: null,
    });
    expect(versionsNote(status([version(1, 'live')]))).toBeNull();
    expect(versionsNote(status([version(1, 'retired'), version(2, 'live')]))).toBe('v2 live, v1 retired');
    expect(
      versionsNote(
        status([version(1, 'dropped'), version(2, 'retired'), version(3, 'abandoned'), version(4, 'live')]),
      ),
    ).toBe('v4 live, v2 retired');
    expect(versionsNote(status([version(1, 'dropped'), version(2, 'live')]))).toBeNull();
  });

  test('what an action did, in words', () => {
    const r = rebuild();
    const change = { consumer: 'stats', version: 2, barrier: null };
    expect(describeChange('approve', { ...change, state: 'live', barrier: '1300' }, r)).toBe(
      'Approved: version 2 of stats is live.',
    );
    expect(describeChange('approve', { ...change, state: 'taking-over', barrier: '1300' }, r)).toBe(
      'Approved: version 2 of stats is taking over. Version 1 stopped at event 1300; version 2 of stats becomes live once it has reached it.',
    );
    expect(describeChange('pause', { ...change, state: 'paused' }, r)).toBe(
      'Paused the rebuild of version 2 of stats: its rows wait until it is resumed.',
    );
    expect(describeChange('resume', { ...change, state: 'rebuilding' }, r)).toBe(
      'Resumed the rebuild of version 2 of stats.',
    );
    expect(describeChange('abandon', { ...change, state: 'abandoned' }, r)).toBe(
      'Abandoned version 2 of stats: its rows are removed and it is not run again; version 1 goes on.',
    );
    expect(describeChange('abandon', { ...change, state: 'abandoned' }, { ...r, sideEffects: true })).toBe(
      'Abandoned version 2 of stats: it will not take over and it is not run again; version 1 goes on.',
    );
  });
});

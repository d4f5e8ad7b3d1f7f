// Consumer rows for the unit tests of the state machine (turn-machine.test.ts and
// operator-transitions.test.ts, over consumer-state.ts): a plain idle row, the row as a turn holds it, the rules both use,
// and generated rows of every kind.
import fc from 'fast-check';
import type { ConsumerState, HeldState, TurnRules } from './consumer-state.js';

export const NOW = new Date('2026-12-02T12:00:00.000Z');
export const ago = (ms: number) => new Date(NOW.getTime() - ms);

export function idleState(fields: Partial<ConsumerState> = {}): ConsumerState {
  return {
    status: 'idle',
    cursor: 0n,
    attempts: 0,
    stuckEventId: null,
    skipEventId: null,
    rearmCount: 0,
    lastError: null,
    lastErrorAt: null,
    failureCategory: null,
    updatedAt: ago(10_000),
    disabledUntil: null,
    gapCount: 0,
    gapsUnfenced: 0,
    gapsRecheck: false,
    gapWatch: [],
    start: null,
    systemIdentifier: 'cluster-a',
    replaysPending: false,
    ...fields,
  };
}

/** The consumer options both suites run the machine under. */
export const RULES: TurnRules = {
  maxAttempts: 3,
  skipApplyErrors: false,
  transactional: false,
  ordering: 'fast',
  retryDelayMs: 1_000,
  retryMaxDelayMs: 60_000,
  rearmCooldownMs: 60_000,
  maxRearmCount: 3,
  shared: true,
};

/** `state` as a turn holds it: locked by xid 1000, at NOW, with no fence and no crash marker. */
export function held(state: ConsumerState, fields: Partial<HeldState> = {}): HeldState {
  return {
    state,
    xid: 1_000n,
    snapshot: { xmin: 900n, xmax: 1_000n, xip: [] },
    now: NOW,
    maxFence: null,
    rowXmin: 900n,
    marker: null,
    laneChange: null,
    parkedReplays: false,
    parkedKeys: false,
    ...fields,
  };
}

const optionalDate = fc.option(
  fc.integer({ min: -120_000, max: 120_000 }).map((ms) => ago(ms)),
  { nil: null },
);

export const stateArbitrary: fc.Arbitrary<ConsumerState> = fc
  .record({
    status: fc.constantFrom('idle', 'processing', 'dead', 'disabled'),
    cursor: fc.bigInt({ min: 0n, max: 50n }),
    attempts: fc.integer({ min: 0, max: 5 }),
    stuck: fc.boolean(),
    skip: fc.boolean(),
    rearmCount: fc.integer({ min: 0, max: 4 }),
    lastErrorAt: optionalDate,
    updatedAgoMs: fc.integer({ min: 0, max: 120_000 }),
    disabledUntil: optionalDate,
    gapCount: fc.integer({ min: 0, max: 3 }),
    gapsRecheck: fc.boolean(),
    start: fc.option(fc.bigInt({ min: 800n, max: 1_100n }), { nil: null }),
    otherCluster: fc.boolean(),
  })
  .map((g) =>
    idleState({
      status: g.status,
      cursor: g.cursor,
      attempts: g.attempts,
      stuckEventId: g.stuck ? g.cursor + 1n : null,
      skipEventId: g.skip ? g.cursor + 1n : null,
      rearmCount: g.rearmCount,
      lastError: g.attempts > 0 ? 'boom' : null,
      lastErrorAt: g.lastErrorAt,
      updatedAt: ago(g.updatedAgoMs),
      disabledUntil: g.status === 'disabled' ? g.disabledUntil : null,
      gapCount: g.gapCount,
      gapsRecheck: g.gapsRecheck,
      start: g.start === null ? null : { snapshot: '800:900:', fence: g.start, upto: g.cursor, after: 0n },
      systemIdentifier: g.otherCluster ? 'cluster-b' : 'cluster-a',
    }),
  );

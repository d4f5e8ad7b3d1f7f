import { describe, expect, test } from 'vitest';
import { isBackingOff, nextBackoff } from './backoff.js';
import { rearmDecision } from '../consumer-state/consumer-state.js';

describe('backoff', () => {
  test('starts at 1 s, doubles, and is capped at 60 s', () => {
    let state = undefined as ReturnType<typeof nextBackoff> | undefined;
    const delays: number[] = [];
    for (let i = 0; i < 9; i++) {
      state = nextBackoff(state, 1_000_000, 1_000, 60_000);
      delays.push(state.untilMs - 1_000_000);
    }
    expect(delays).toEqual([1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000, 60_000]);
  });

  test('is over once its time has passed', () => {
    const state = nextBackoff(undefined, 0, 1_000, 60_000);
    expect(isBackingOff(state, 999)).toBe(true);
    expect(isBackingOff(state, 1_000)).toBe(false);
    expect(isBackingOff(undefined, 0)).toBe(false);
  });
});

describe('rearm rule', () => {
  const rules = { rearmCooldownMs: 300_000, maxRearmCount: 3 };
  const deadAt = new Date('2026-01-01T00:00:00Z');
  test('waits for the cooldown, then re-arms, until the budget is used up', () => {
    expect(
      rearmDecision({ rearmCount: 0, lastWriteAt: deadAt }, new Date(deadAt.getTime() + 299_999), rules),
    ).toBe('cooling-down');
    expect(
      rearmDecision({ rearmCount: 0, lastWriteAt: deadAt }, new Date(deadAt.getTime() + 300_000), rules),
    ).toBe('rearm');
    expect(
      rearmDecision({ rearmCount: 3, lastWriteAt: deadAt }, new Date(deadAt.getTime() + 999_999), rules),
    ).toBe('exhausted');
  });
});

import { afterEach, describe, expect, it, vi } from 'vitest';
import { settleWithin, TIMED_OUT } from './time-limit.js';

describe('settleWithin', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('gives the value of a promise that settles in time, and clears its timer', async () => {
    vi.useFakeTimers();
    const outcome = settleWithin(Promise.resolve(42), 1_000);
    await expect(outcome).resolves.toBe(42);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('passes on the rejection of a promise that settles in time, and clears its timer', async () => {
    vi.useFakeTimers();
    const failure = new Error('no');
    const outcome = settleWithin(Promise.reject(failure), 1_000);
    await expect(outcome).rejects.toBe(failure);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('gives TIMED_OUT once the time is up, and ignores what the promise does later', async () => {
    vi.useFakeTimers();
    let settle: (value: string) => void = () => undefined;
    const late = new Promise<string>((resolve) => {
      settle = resolve;
    });
    const outcome = settleWithin(late, 50);
    await vi.advanceTimersByTimeAsync(49);
    let answered: unknown = 'pending';
    void outcome.then((value) => {
      answered = value;
    });
    await Promise.resolve();
    expect(answered).toBe('pending');
    await vi.advanceTimersByTimeAsync(1);
    expect(answered).toBe(TIMED_OUT);
    expect(vi.getTimerCount()).toBe(0);
    settle('too late');
    await expect(outcome).resolves.toBe(TIMED_OUT);
  });

  it('handles a rejection that comes after the time is up (no unhandled rejection)', async () => {
    vi.useFakeTimers();
    let fail: (error: Error) => void = () => undefined;
    const late = new Promise<never>((_, reject) => {
      fail = reject;
    });
    const outcome = settleWithin(late, 10);
    await vi.advanceTimersByTimeAsync(10);
    await expect(outcome).resolves.toBe(TIMED_OUT);
    fail(new Error('too late'));
    await Promise.resolve();
  });
});

// Wake-ups coalesce: at most one pass runs and one more is queued, with the strongest reason asked.
import { describe, expect, test } from 'vitest';
import type { Logger } from '../logger.js';
import { PassScheduler, type PassWake } from './pass.js';

function harness(accepting = () => true) {
  const runs: PassWake[] = [];
  const errors: string[] = [];
  let release: () => void = () => undefined;
  let fail = false;
  const logger = {
    debug: () => undefined,
    info: () => undefined,
    warn: () => undefined,
    error: (_fields: object, message: string) => {
      errors.push(message);
    },
  } as Logger;
  const scheduler = new PassScheduler(
    async (wake) => {
      runs.push(wake);
      await new Promise<void>((resolve) => {
        release = resolve;
      });
      if (fail) {
        fail = false;
        throw new Error('pass broke');
      }
    },
    accepting,
    logger,
  );
  return {
    scheduler,
    runs,
    errors,
    /** Lets the running pass end, and waits until the scheduler has reacted. */
    async finish(options: { fail?: boolean } = {}) {
      fail = options.fail ?? false;
      release();
      await new Promise((resolve) => setImmediate(resolve));
    },
  };
}

describe('PassScheduler', () => {
  test('requests while a pass runs make exactly one more pass, for the strongest reason asked', async () => {
    const h = harness();
    h.scheduler.request(false);
    expect(h.runs).toEqual([undefined]);
    h.scheduler.request(true); // NOTIFY
    h.scheduler.request(false);
    h.scheduler.request(true, true); // a commit of this process
    expect(h.runs).toHaveLength(1);
    await h.finish();
    expect(h.runs).toEqual([undefined, 'local']);
    await h.finish();
    expect(h.runs).toHaveLength(2);
    await h.scheduler.drain();
  });

  test('a NOTIFY alone is a notify pass; a poll tick is neither', async () => {
    const h = harness();
    h.scheduler.request(true);
    await h.finish();
    h.scheduler.request(false);
    await h.finish();
    expect(h.runs).toEqual(['notify', undefined]);
  });

  test('nothing runs while not accepting, and a queued pass is dropped when it stops accepting', async () => {
    let accepting = false;
    const h = harness(() => accepting);
    h.scheduler.request(true);
    expect(h.runs).toEqual([]);
    accepting = true;
    h.scheduler.request(false);
    h.scheduler.request(false);
    accepting = false;
    await h.finish();
    expect(h.runs).toEqual([undefined]);
    await h.scheduler.drain();
  });

  test('a pass that throws is logged, and the next request runs again', async () => {
    const h = harness();
    h.scheduler.request(false);
    await h.finish({ fail: true });
    expect(h.errors).toEqual(['dispatcher pass failed']);
    h.scheduler.request(false);
    expect(h.runs).toHaveLength(2);
    await h.finish();
  });

  test('drain waits for tracked passes', async () => {
    const h = harness();
    let settled = false;
    let resolveTracked: () => void = () => undefined;
    void h.scheduler.track(
      new Promise<void>((resolve) => {
        resolveTracked = resolve;
      }),
    );
    const drained = h.scheduler.drain().then(() => {
      settled = true;
    });
    await new Promise((resolve) => setImmediate(resolve));
    expect(settled).toBe(false);
    resolveTracked();
    await drained;
    expect(settled).toBe(true);
  });
});

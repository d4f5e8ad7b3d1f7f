import { describe, expect, test } from 'vitest';
import { TurnSlots } from './slots.js';

function deferred<T>() {
  let resolve: (value: T) => void = () => undefined;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

describe('TurnSlots', () => {
  test('a second caller for the same key gets the running turn instead of starting one', async () => {
    const slots = new TurnSlots<number>(2);
    const d = deferred<number>();
    let started = 0;
    const turn = () => {
      started += 1;
      return d.promise;
    };
    const first = slots.run('a', turn);
    const second = slots.run('a', turn);
    expect(second).toBe(first);
    d.resolve(7);
    expect(await Promise.all([first, second])).toEqual([7, 7]);
    expect(started).toBe(1);
  });

  test('a queued turn is joined too, and runs once a slot frees', async () => {
    const slots = new TurnSlots<string>(1);
    const blocker = deferred<string>();
    const started: string[] = [];
    void slots.run('x', () => {
      started.push('x');
      return blocker.promise;
    });
    const queued = slots.run('y', () => {
      started.push('y');
      return Promise.resolve('y done');
    });
    const joined = slots.run('y', () => Promise.resolve('never'));
    expect(joined).toBe(queued);
    await Promise.resolve();
    expect(started).toEqual(['x']);
    blocker.resolve('x done');
    expect(await joined).toBe('y done');
    expect(started).toEqual(['x', 'y']);
  });

  test('never runs more turns than it has slots', async () => {
    const slots = new TurnSlots<void>(2);
    const gates = Array.from({ length: 5 }, () => deferred<undefined>());
    const runs = gates.map((g, i) => slots.run(`k${i}`, () => g.promise));
    await Promise.resolve();
    expect(slots.running).toBe(2);
    for (const g of gates) g.resolve(undefined);
    await Promise.all(runs);
    expect(slots.maxRunning).toBe(2);
    expect(slots.running).toBe(0);
  });
});

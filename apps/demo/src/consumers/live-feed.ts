import type { Consumer, EventRecord } from '@sluice/core';

type Listener = (event: EventRecord) => void;

/**
 * A per-instance consumer: every process of the app receives every event and pushes it to the
 * browsers connected to it over Server-Sent Events. It starts at 'now': a new instance does not
 * replay history to its clients.
 */
export function liveFeed() {
  const listeners = new Set<Listener>();
  const consumer: Consumer = {
    name: 'live-feed',
    delivery: 'per-instance',
    startFrom: 'now',
    handler: (event) => {
      for (const listener of listeners) listener(event);
    },
  };
  return {
    consumer,
    subscribe(listener: Listener): () => void {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    get clients(): number {
      return listeners.size;
    },
  };
}

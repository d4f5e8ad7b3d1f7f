// What storm.reliability.test.ts and its dispatcher process (storm-child.ts) share.

export interface StormChildConfig {
  readonly url: string;
  readonly schema: string;
  readonly file: string;
  readonly instanceId: string;
  readonly parentPid: number;
}

/** One delivery. */
export interface StormDelivery {
  readonly c: string;
  readonly id: string;
}

export const STORM_CONSUMERS = ['plain-a', 'plain-b', 'batched', 'projection', 'feed'] as const;

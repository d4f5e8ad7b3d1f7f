// The chaos run's consumers, shared by the dispatcher processes and the checker.

export interface ChaosConsumerSpec {
  readonly name: string;
  /** Records deliveries in chaos.deliveries through ctx.tx (exactly-once effects) as well as in JSONL. */
  readonly transactional: boolean;
  /** Handles whole batches through batchHandler. */
  readonly batch: boolean;
  readonly ordering: 'fast' | 'strict';
  /** Runs as this many lanes (docs/design.md §11): order is then checked per stream. */
  readonly lanes: number;
}

/**
 * `count` consumers: the first half non-transactional (`nt-…`), the second half transactional
 * (`tx-…`). `nt-00` and the first transactional one use batchHandler, `nt-01` is strict; `nt-02`
 * runs as 4 lanes, `nt-03` as 16, and the third transactional one as 4.
 */
export function chaosConsumers(count: number): ChaosConsumerSpec[] {
  if (!Number.isSafeInteger(count) || count < 4) throw new Error(`need at least 4 consumers, got ${count}`);
  const half = Math.floor(count / 2);
  return Array.from({ length: count }, (_, i) => {
    const transactional = i >= half;
    const name = `${transactional ? 'tx' : 'nt'}-${String(i).padStart(2, '0')}`;
    return {
      name,
      transactional,
      batch: i === 0 || i === half,
      ordering: i === 1 ? 'strict' : 'fast',
      lanes: i === 2 || i === half + 2 ? 4 : i === 3 ? 16 : 1,
    };
  });
}

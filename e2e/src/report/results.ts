// The reliability suites' results: each suite writes one JSON file into e2e/results/, and
// write-results.ts turns them all into e2e/RESULTS.md and a summary table (Jepsen-style columns).
import { mkdir, writeFile } from 'node:fs/promises';

/** One checked consumer's history (docs/reliability.md §4). */
export interface ConsumerCheck {
  readonly consumer: string;
  /** Committed events the consumer should have received and did not (I1). */
  readonly lost: number;
  /** Deliveries beyond the first of an event (I3). */
  readonly duplicated: number;
  /** Deliveries below the highest id already delivered, allowed as late gap deliveries (I2). */
  readonly late: number;
  /** Out-of-order deliveries that were NOT late gap deliveries (I2 violations). */
  readonly inversions: number;
  /** Persisted cursor moves backwards outside audited restarts (I4). */
  readonly cursorRegressions: number;
  /** Deliveries of ids that never committed (rolled back, or never existed) (I7). */
  readonly phantoms: number;
}

export interface ScenarioResult {
  /** Scenario id of docs/reliability.md §5, e.g. 'G1', 'C1', 'X3'. */
  readonly id: string;
  readonly title: string;
  /** Invariants checked, e.g. ['I1', 'I3']. */
  readonly invariants: readonly string[];
  /** The figures the catalogue asks for, by name (numbers or short text). */
  readonly figures: Readonly<Record<string, number | string>>;
  /** Every invariant held and every target was met. */
  readonly ok: boolean;
  /** Why not, when !ok. */
  readonly failure?: string;
}

export interface SuiteResult {
  /** File name of the result, e.g. 'chaos', 'gap-torture', 'security'. */
  readonly suite: string;
  readonly profile: 'ci' | 'soak';
  readonly startedAt: string;
  readonly durationMs: number;
  readonly postgresVersion?: string;
  readonly events?: { readonly appended: number; readonly committed: number; readonly aborted: number };
  readonly consumers?: readonly ConsumerCheck[];
  /** Faults injected, by class (e.g. 'kill -9': 12, 'immediate restart': 1). */
  readonly faults?: Readonly<Record<string, number>>;
  /** Time from recovery trigger to first delivery, in ms. */
  readonly recoveryMs?: { readonly p50: number; readonly p99: number; readonly samples: number };
  readonly maxPendingRanges?: number;
  readonly mutantsKilled?: {
    readonly killed: number;
    readonly total: number;
    readonly runsToKill: Readonly<Record<string, number>>;
  };
  readonly seeds?: readonly (number | string)[];
  readonly scenarios: readonly ScenarioResult[];
}

/** Which profile is running: `SLUICE_PROFILE=soak` for `pnpm test:soak`, else the CI profile. */
export function profile(): 'ci' | 'soak' {
  return process.env['SLUICE_PROFILE'] === 'soak' ? 'soak' : 'ci';
}

const RESULTS_DIR = new URL('../../results/', import.meta.url);

/** Writes a suite's result for write-results.ts to collect. */
export async function recordSuiteResult(result: SuiteResult): Promise<void> {
  await mkdir(RESULTS_DIR, { recursive: true });
  await writeFile(new URL(`${result.suite}.json`, RESULTS_DIR), `${JSON.stringify(result, null, 2)}\n`);
}

// Test-only seams for the gap-torture suite (docs/reliability.md §6.5). The shipped dispatcher is never
// changed: the suite replaces three of its modules with vi.mock wrappers that consult this
// switchboard, which picks the deliberately broken variant ("mutant") of the current run and lets
// a command run at a precise point inside a turn (right after its fetch statement).

export type Mutant =
  | 'cursor-only' // 1: no gaps at all: holes are passed over (the naive WHERE id > cursor loop)
  | 'burn-by-age' // 2: a range is given up once it is old enough, whatever its fence says
  | 'fence-is-xmax' // 3: the fence is the observing snapshot's xmax instead of a later xid (E2)
  | 'no-xid-first' // 4: no xid before nextval(): the trigger is dropped, reservers may lack an xid (E1)
  | 'late-snapshot' // 5: the burn check uses a snapshot taken after the fetch statement (F2)
  | 'cached-sequence' // 6: the id sequence caches 20 values per session
  | 'fence-before-lock' // 7: the turn's xid (its fence) is drawn before its row lock is taken
  | 'relane-drops-gaps'; // 8: an old lane of a change of lane count retires with gaps still pending

export const MUTANTS: readonly Mutant[] = [
  'cursor-only',
  'burn-by-age',
  'fence-is-xmax',
  'no-xid-first',
  'late-snapshot',
  'cached-sequence',
  'fence-before-lock',
  'relane-drops-gaps',
];

interface Switchboard {
  mutant: Mutant | null;
  /** Run once right after the next turn's fetch statement (a commit landing mid-turn). */
  afterFetch: (() => Promise<void>) | null;
  /** xmax of the last fetch statement's snapshot (for the fence-is-xmax mutant). */
  lastFetchXmax: bigint | null;
}

const KEY = Symbol.for('sluice.gap-torture.switchboard');
const store = globalThis as unknown as Record<symbol, Switchboard | undefined>;

export function switchboard(): Switchboard {
  store[KEY] ??= { mutant: null, afterFetch: null, lastFetchXmax: null };
  return store[KEY];
}

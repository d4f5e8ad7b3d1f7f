/**
 * The dead → idle rule (docs/design.md §6.1): a dead consumer whose last write is older than the cooldown is
 * re-armed, at most maxRearmCount times since the last turn that advanced its cursor.
 */
export type RearmDecision = 'rearm' | 'cooling-down' | 'exhausted';

export function rearmDecision(
  consumer: { readonly rearmCount: number; readonly lastWriteAt: Date },
  now: Date,
  rules: { readonly rearmCooldownMs: number; readonly maxRearmCount: number },
): RearmDecision {
  if (consumer.rearmCount >= rules.maxRearmCount) return 'exhausted';
  return now.getTime() - consumer.lastWriteAt.getTime() >= rules.rearmCooldownMs ? 'rearm' : 'cooling-down';
}

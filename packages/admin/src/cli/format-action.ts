/** `mailer`, or `mailer (instance web-1)` for a per-instance row. */
export function consumerLabel(consumer: string, instanceId: string): string {
  return instanceId === '*' ? consumer : `${consumer} (instance ${instanceId})`;
}

/** `, dead → idle` when the status changed, else nothing. */
export function statusChange(before: string, after: string): string {
  return before === after ? '' : `, ${before} → ${after}`;
}

import { createHash } from 'node:crypto';

// PostgreSQL channel names are identifiers: longer than 63 bytes and pg_notify() fails.
const MAX_CHANNEL_BYTES = 63;

/** The LISTEN/NOTIFY channel of a Sluice schema. Its payload is only ever a hint (docs/design.md §3.3). */
export function wakeUpChannel(schema: string): string {
  const plain = `sluice_${schema}`;
  if (Buffer.byteLength(plain) <= MAX_CHANNEL_BYTES) return plain;
  return `sluice_${createHash('sha256').update(schema).digest('hex').slice(0, 32)}`;
}

import { createHash } from 'node:crypto';

/**
 * Every system is fed the same ~1 KB JSON object per event: a sequence number (how lost and
 * duplicated deliveries are counted) and order-like fields padded with hex text, which jsonb stores
 * uncompressed (values this small are never TOASTed).
 */
export interface BenchPayload {
  [key: string]: unknown;
  seq: number;
  orderId: string;
  customerId: number;
  currency: string;
  totalCents: number;
  lines: number;
  note: string;
}

const NOTE_REPEAT = 27; // 27 × 32 hex chars: ~1 KB in total

export function payload(seq: number): BenchPayload {
  const hash = createHash('md5').update(String(seq)).digest('hex');
  return {
    seq,
    orderId: hash,
    customerId: seq % 997,
    currency: 'EUR',
    totalCents: (seq * 7919) % 100_000,
    lines: (seq % 5) + 1,
    note: hash.repeat(NOTE_REPEAT),
  };
}

/** The same object built in SQL from `g` (0-based seq), for loading backlogs server-side. */
export const PAYLOAD_SQL = `jsonb_build_object(
  'seq', g, 'orderId', md5(g::text), 'customerId', g % 997, 'currency', 'EUR',
  'totalCents', (g::bigint * 7919) % 100000, 'lines', g % 5 + 1, 'note', repeat(md5(g::text), ${NOTE_REPEAT}))`;

export function streamOf(seq: number): string {
  return `order-${seq % 1000}`;
}

/**
 * The stream of event `seq` in the slow-handler backlog: one of `streams`, drawn at random by a
 * hash of `seq` (MurmurHash3's finaliser; seeded, so every run and every system has the same log).
 * Events of a stream lie at random distances, as with real traffic, not `streams` apart as in
 * streamOf(): a worker with a few dozen events in hand can then hold two of one stream at once.
 */
export function drawnStreamOf(seq: number, streams: number): string {
  let x = (seq + 0x9e3779b9) | 0;
  x = Math.imul(x ^ (x >>> 16), 0x85ebca6b);
  x = Math.imul(x ^ (x >>> 13), 0xc2b2ae35);
  x ^= x >>> 16;
  return `order-${(x >>> 0) % streams}`;
}

export const EVENT_TYPE = 'OrderPlaced';

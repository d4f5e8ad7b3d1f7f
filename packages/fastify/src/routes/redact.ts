import type { ResolvedOps } from '../options.js';

/** What the ops routes show of an event's payload: a dead letter or an event of the log. */
interface Payload {
  readonly type: string;
  readonly streamId: string;
  readonly data: Record<string, unknown>;
  readonly metadata: Record<string, unknown>;
}

/**
 * The one place where a payload meets `ops.redact` before an operator sees it (the dead-letter
 * list, one dead letter, one event): the item with its `data` and `metadata` replaced by what the
 * option returns. Only those two fields are taken from its result, so a redaction can never
 * rewrite an id, a type or a stream.
 */
export function redacted<T extends Payload>(
  ops: ResolvedOps,
  item: T,
): Omit<T, 'data' | 'metadata'> & { data: unknown; metadata: unknown } {
  const { data, metadata } = ops.redact({
    type: item.type,
    streamId: item.streamId,
    data: item.data,
    metadata: item.metadata,
  });
  return { ...item, data, metadata };
}

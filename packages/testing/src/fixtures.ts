import type { Consumer, EventRecord, HandlerContext, NewEvent, Sql } from '@sluice/core';
import { append } from '@sluice/core';

export interface RecordingConsumer {
  readonly consumer: Consumer;
  /** Every delivery, in order (repeats included). */
  readonly seen: EventRecord[];
  /** The delivered ids, in order. */
  ids(): bigint[];
}

/** A consumer that records what it is given; `extra` overrides any consumer field. */
export function recordingConsumer(name: string, extra: Partial<Consumer> = {}): RecordingConsumer {
  const seen: EventRecord[] = [];
  const consumer: Consumer = {
    name,
    handler: (event: EventRecord) => {
      seen.push(event);
    },
    ...extra,
  };
  return { consumer, seen, ids: () => seen.map((e) => e.id) };
}

/**
 * A consumer whose handler throws for events matching `predicate` and records the others.
 * `failures` counts the thrown calls per event id.
 */
export function failingOn(
  name: string,
  predicate: (event: EventRecord, context: HandlerContext) => boolean,
  extra: Partial<Consumer> = {},
): RecordingConsumer & { readonly failures: Map<bigint, number> } {
  const seen: EventRecord[] = [];
  const failures = new Map<bigint, number>();
  const consumer: Consumer = {
    name,
    handler: (event: EventRecord, context: HandlerContext) => {
      if (predicate(event, context)) {
        failures.set(event.id, (failures.get(event.id) ?? 0) + 1);
        throw new Error(`poison event ${event.id}`);
      }
      seen.push(event);
    },
    ...extra,
  };
  return { consumer, seen, failures, ids: () => seen.map((e) => e.id) };
}

/** Appends `count` events (one transaction) and returns them. */
export async function appendEvents(
  sql: Sql,
  count: number,
  make: (n: number) => NewEvent = (n) => ({ streamId: `stream-${n % 7}`, type: 'TestEvent', data: { n } }),
  schema?: string,
): Promise<EventRecord[]> {
  return sql.begin((tx) =>
    append(
      tx,
      Array.from({ length: count }, (_, n) => make(n)),
      schema === undefined ? {} : { schema },
    ),
  );
}

import {
  context as otelContext,
  INVALID_SPAN_CONTEXT,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  TraceFlags,
  type Link,
  type Context,
  type Span,
  type SpanContext,
  type Tracer,
  type TracerProvider,
} from '@opentelemetry/api';
import { messageOf } from '../errors.js';
import type { JsonObject } from '../events.js';
import { ATTR, MESSAGING_SYSTEM } from './attributes.js';

export function createTracer(tracerProvider: TracerProvider | undefined): Tracer {
  return (tracerProvider ?? trace.getTracerProvider()).getTracer('@sluice/core');
}

/** The W3C traceparent of the active span, if any (stored in event metadata by append()). */
export function activeTraceparent(): string | undefined {
  const context = trace.getActiveSpan()?.spanContext();
  if (!context || !trace.isSpanContextValid(context)) return undefined;
  const sampled: number = TraceFlags.SAMPLED;
  const flags = (context.traceFlags & sampled) === sampled ? '01' : '00';
  return `00-${context.traceId}-${context.spanId}-${flags}`;
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** Parses a W3C traceparent into a remote span context; undefined when malformed. */
export function parseTraceparent(value: unknown): SpanContext | undefined {
  if (typeof value !== 'string') return undefined;
  const match = TRACEPARENT.exec(value);
  if (!match) return undefined;
  const [, traceId = '', spanId = '', flags = '00'] = match;
  const context: SpanContext = { traceId, spanId, traceFlags: parseInt(flags, 16), isRemote: true };
  return trace.isSpanContextValid(context) ? context : undefined;
}

/** Links from a handler span to the traces that appended the events (request → append → handler). */
export function linksFromMetadata(metadata: readonly JsonObject[]): Link[] {
  const links: Link[] = [];
  for (const m of metadata) {
    const context = parseTraceparent(m['traceparent']);
    if (context) links.push({ context });
  }
  return links;
}

export function startTurnSpan(tracer: Tracer, consumer: string, instance: string): Span {
  return tracer.startSpan(`sluice.turn ${consumer}`, {
    kind: SpanKind.INTERNAL,
    attributes: {
      [ATTR.messagingSystem]: MESSAGING_SYSTEM,
      [ATTR.consumer]: consumer,
      [ATTR.instance]: instance,
      [ATTR.messagingConsumerGroup]: consumer,
    },
  });
}

/**
 * A handler call's span, a child of the turn's. Without a tracing SDK (the turn span carries no
 * valid context) it is a shared no-op span: no span, attributes or links are built for each event.
 */
export function startHandlerSpan(
  tracer: Tracer,
  parent: Span,
  consumer: string,
  instance: string,
  events: readonly { id: bigint; type: string; metadata: JsonObject }[],
): Span {
  const context = turnContext(parent);
  if (!context) return NO_SPAN;
  const first = events[0];
  const links = linksFromMetadata(events.map((e) => e.metadata));
  linkTurn(parent, links);
  return tracer.startSpan(
    `process ${consumer}`,
    {
      kind: SpanKind.CONSUMER,
      links,
      attributes: {
        [ATTR.messagingSystem]: MESSAGING_SYSTEM,
        [ATTR.messagingOperationType]: 'process',
        [ATTR.messagingOperationName]: 'process',
        [ATTR.messagingConsumerGroup]: consumer,
        [ATTR.consumer]: consumer,
        [ATTR.instance]: instance,
        ...(events.length === 1 && first
          ? { [ATTR.messagingMessageId]: first.id.toString(), [ATTR.eventType]: first.type }
          : { [ATTR.messagingBatchCount]: events.length }),
      },
    },
    // Child of the turn span; the appenders' traces are links (one handler span, many requests).
    context,
  );
}

const NO_SPAN: Span = trace.wrapSpanContext(INVALID_SPAN_CONTEXT);

/**
 * Runs `fn` with `span` as the active span: a handler's own spans are its children, and an event it
 * appends carries its traceparent. Without a tracing SDK (no valid span) `fn` just runs.
 */
export function withinSpan<T>(span: Span, fn: () => T): T {
  if (span === NO_SPAN || !trace.isSpanContextValid(span.spanContext())) return fn();
  return otelContext.with(trace.setSpan(otelContext.active(), span), fn);
}

/**
 * The context holding a turn span, made once per turn rather than once per handler call;
 * undefined when the turn span has no valid span context (no tracing SDK is registered).
 */
const turnContexts = new WeakMap<Span, Context | undefined>();

function turnContext(turnSpan: Span): Context | undefined {
  if (turnContexts.has(turnSpan)) return turnContexts.get(turnSpan);
  const context = trace.isSpanContextValid(turnSpan.spanContext())
    ? trace.setSpan(ROOT_CONTEXT, turnSpan)
    : undefined;
  turnContexts.set(turnSpan, context);
  return context;
}

/** The appending spans a turn span already links to (a span is linked once per turn). */
const turnLinks = new WeakMap<Span, Set<string>>();

/**
 * Links the turn span to the spans that appended the events it delivers: the turn runs outside
 * any request (docs/design.md §7), so a trace reaches its turn through these links, never as a
 * parent.
 */
function linkTurn(turnSpan: Span, links: readonly Link[]): void {
  let linked = turnLinks.get(turnSpan);
  if (!linked) turnLinks.set(turnSpan, (linked = new Set()));
  const fresh = links.filter((l) => {
    const key = `${l.context.traceId}-${l.context.spanId}`;
    if (linked.has(key)) return false;
    linked.add(key);
    return true;
  });
  if (fresh.length > 0) turnSpan.addLinks(fresh);
}

export function endSpanWithError(span: Span, error: unknown): void {
  const message = messageOf(error);
  span.setStatus({ code: SpanStatusCode.ERROR, message });
  try {
    // The SDK reads the error's name, message and stack: a handler's error may throw from them.
    if (error instanceof Error) span.recordException(error);
  } catch {
    span.recordException(message);
  }
  span.end();
}

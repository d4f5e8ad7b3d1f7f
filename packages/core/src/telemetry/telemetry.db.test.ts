// docs/design.md §7 against real PostgreSQL: the metrics and spans of a dispatcher, read back through
// in-memory OpenTelemetry readers and exporters, with the names and attributes of attributes.ts.
import { context, SpanKind, SpanStatusCode, trace, type Attributes } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  DataPointType,
  MeterProvider,
  MetricReader,
  type DataPoint,
  type MetricData,
} from '@opentelemetry/sdk-metrics';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import {
  appendEvents,
  consumerRow,
  drainUntilIdle,
  failingOn,
  freshSchema,
  passUntil,
  recordingConsumer,
  until,
} from '@sluice/testing';
import { heldTransaction, registeredDispatcher, useTestDatabase } from '@sluice/testing/vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, onTestFinished, test } from 'vitest';
import { append, transaction } from '../append.js';
import { testDispatcher } from '../test-support.js';
import { ATTR, METRIC } from './attributes.js';
import { HANDLER_DURATION_BOUNDARIES_SECONDS } from './metrics.js';

const db = await useTestDatabase();

const event = (n: number) => ({ streamId: `s-${n}`, type: 'TelemetryTest', data: { n } });
const of = (consumer: string, instance = '*'): Attributes => ({
  [ATTR.consumer]: consumer,
  [ATTR.instance]: instance,
});

/** A reader that exports nothing: the test collects from it when it wants to look. */
class OnDemandReader extends MetricReader {
  protected override onShutdown(): Promise<void> {
    return Promise.resolve();
  }
  protected override onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
}

const matching = <T>(points: DataPoint<T>[], attributes: Attributes) =>
  points.filter((p) => Object.entries(attributes).every(([key, value]) => p.attributes[key] === value));

/** One collection of every metric, with lookups by name and attributes. */
function snapshot(metrics: MetricData[]) {
  const find = (name: string) => metrics.find((m) => m.descriptor.name === name);
  return {
    metric(name: string): MetricData {
      const found = find(name);
      if (!found) throw new Error(`metric ${name} was not collected`);
      return found;
    },
    /** Sum over the matching points of a counter or gauge; undefined when nothing was recorded. */
    value(name: string, attributes: Attributes = {}): number | undefined {
      const m = find(name);
      if (!m) return undefined;
      if (m.dataPointType !== DataPointType.SUM && m.dataPointType !== DataPointType.GAUGE) {
        throw new Error(`metric ${name} is not a counter or gauge`);
      }
      const points = matching(m.dataPoints, attributes);
      return points.length === 0 ? undefined : points.reduce((sum, p) => sum + p.value, 0);
    },
    /** How many values a histogram recorded at the matching points. */
    count(name: string, attributes: Attributes = {}): number {
      const m = find(name);
      if (m?.dataPointType !== DataPointType.HISTOGRAM)
        throw new Error(`histogram ${name} was not collected`);
      return matching(m.dataPoints, attributes).reduce((sum, p) => sum + p.value.count, 0);
    },
  };
}

/** Meter and tracer providers of this test only, passed to the dispatcher explicitly. */
function telemetry() {
  const reader = new OnDemandReader();
  const meterProvider = new MeterProvider({ readers: [reader] });
  const exporter = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  onTestFinished(async () => {
    await meterProvider.shutdown();
    await tracerProvider.shutdown();
  });
  return {
    meterProvider,
    tracerProvider,
    async metrics() {
      const { resourceMetrics, errors } = await reader.collect();
      expect(errors).toEqual([]);
      return snapshot(resourceMetrics.scopeMetrics.flatMap((s) => s.metrics));
    },
    async spans(): Promise<ReadableSpan[]> {
      await tracerProvider.forceFlush();
      return exporter.getFinishedSpans();
    },
  };
}

describe('telemetry', () => {
  beforeAll(() => {
    // trace.getActiveSpan() at append needs a context manager; the providers stay local to each test.
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  });
  afterAll(() => {
    context.disable();
  });

  test('processed events, handler durations, passes and the lag and gap gauges are recorded per consumer', async () => {
    const t = telemetry();
    const shared = recordingConsumer('shared');
    const local = recordingConsumer('local', { delivery: 'per-instance' });
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [shared.consumer, local.consumer], {
      instanceId: 'node-a',
      meterProvider: t.meterProvider,
    });
    await appendEvents(db.sql, 5, event, schema);

    await dispatcher.runOnce(); // its pre-check saw both cursors 5 events behind the head
    let m = await t.metrics();
    expect(m.value(METRIC.consumerLag, of('shared'))).toBe(5);
    expect(m.value(METRIC.consumerLag, of('local', 'node-a'))).toBe(5);

    const passes = await drainUntilIdle(dispatcher);
    m = await t.metrics();
    expect(shared.ids()).toHaveLength(5);
    expect(m.value(METRIC.eventsProcessed, of('shared'))).toBe(5);
    expect(m.value(METRIC.eventsProcessed, of('local', 'node-a'))).toBe(5);
    expect(m.metric(METRIC.eventsProcessed).descriptor.unit).toBe('{event}');
    expect(m.metric(METRIC.handlerDuration).descriptor.unit).toBe('s');
    expect(m.count(METRIC.handlerDuration, { ...of('shared'), [ATTR.handlerOutcome]: 'ok' })).toBe(5);
    expect(m.count(METRIC.handlerDuration, { ...of('local', 'node-a'), [ATTR.handlerOutcome]: 'ok' })).toBe(
      5,
    );
    expect(m.value(METRIC.passes)).toBe(passes.length + 1);
    expect(m.value(METRIC.passes, { [ATTR.passOutcome]: 'ok' })).toBeGreaterThanOrEqual(1);
    expect(m.value(METRIC.passes, { [ATTR.passOutcome]: 'idle' })).toBeGreaterThanOrEqual(1);
    for (const attributes of [of('shared'), of('local', 'node-a')]) {
      expect(m.value(METRIC.consumerLag, attributes)).toBe(0);
      expect(m.value(METRIC.gapsPending, attributes)).toBe(0);
      expect(m.value(METRIC.consumerDead, attributes)).toBe(0);
    }
    expect(m.value(METRIC.eventsFailed)).toBeUndefined();
  });

  test('handler durations spread over the seconds-sized buckets of the histogram, not all in its first', async () => {
    const schema = await freshSchema(db.sql);
    const t = telemetry();
    // Real handler times from nothing to 400 ms, one per bucket of the advised boundaries.
    const sleepsMs = [0, 3, 7, 18, 40, 75, 180, 400];
    const timed = recordingConsumer('timed', {
      handler: async (e) => {
        await sleep((e.data as { ms: number }).ms);
      },
    });
    const dispatcher = testDispatcher(db.sql, schema, [timed.consumer], { meterProvider: t.meterProvider });
    await dispatcher.ensureRegistered();
    await appendEvents(db.sql, sleepsMs.length, (n) => ({ ...event(n), data: { ms: sleepsMs[n] } }), schema);
    await drainUntilIdle(dispatcher);

    const histogram = (await t.metrics()).metric(METRIC.handlerDuration);
    expect(histogram.descriptor.unit).toBe('s');
    expect(histogram.dataPointType).toBe(DataPointType.HISTOGRAM);
    if (histogram.dataPointType !== DataPointType.HISTOGRAM) return;
    const [point] = matching(histogram.dataPoints, { ...of('timed'), [ATTR.handlerOutcome]: 'ok' });
    // The instrument's advice reached the SDK: no View was registered.
    expect(point!.value.buckets.boundaries).toEqual(HANDLER_DURATION_BOUNDARIES_SECONDS);
    expect(point!.value.count).toBe(sleepsMs.length);
    const { boundaries, counts } = point!.value.buckets;
    const occupied = counts.filter((n) => n > 0).length;
    expect(occupied, `bucket counts ${JSON.stringify(counts)}`).toBeGreaterThanOrEqual(5);
    // A handler lasts at least its sleep (give timers 1 ms of rounding): at most the shorter
    // sleeps fit under each boundary. Seconds recorded against millisecond buckets, or the reverse,
    // would break this.
    let cumulative = 0;
    boundaries.forEach((boundary, i) => {
      cumulative += counts[i]!;
      expect(cumulative, `observations <= ${boundary} s`).toBeLessThanOrEqual(
        sleepsMs.filter((ms) => ms - 1 <= boundary * 1000).length,
      );
    });
    expect(point!.value.sum).toBeGreaterThanOrEqual(
      (sleepsMs.reduce((a, b) => a + b, 0) - sleepsMs.length) / 1000,
    );
  });

  test('handler failures count in sluice.events.failed and a consumer at maxAttempts shows as dead', async () => {
    const t = telemetry();
    const c = failingOn('poisoned', () => true, { errorPolicy: { maxAttempts: 2 } });
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer], {
      meterProvider: t.meterProvider,
    });
    await appendEvents(db.sql, 1, event, schema);

    await dispatcher.runOnce(); // attempt 1 fails
    await dispatcher.runOnce(); // its pre-check sees the consumer alive; attempt 2 fails: dead
    let m = await t.metrics();
    expect(m.value(METRIC.eventsFailed, of('poisoned'))).toBe(2);
    expect(m.count(METRIC.handlerDuration, { ...of('poisoned'), [ATTR.handlerOutcome]: 'error' })).toBe(2);
    expect(m.value(METRIC.consumerDead, of('poisoned'))).toBe(0);
    expect((await consumerRow(db.sql, schema, 'poisoned')).status).toBe('dead');

    await dispatcher.runOnce(); // the pre-check observes the dead row
    m = await t.metrics();
    expect(m.value(METRIC.consumerDead, of('poisoned'))).toBe(1);
    expect(m.value(METRIC.consumerLag, of('poisoned'))).toBe(1);
    expect(m.value(METRIC.eventsProcessed)).toBeUndefined();
  });

  test('a consumer that never advanced stagnates from its registration, not from its last failed attempt', async () => {
    const t = telemetry();
    const c = failingOn('stuck-first', () => true, { errorPolicy: { maxAttempts: 1000 } });
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer], {
      meterProvider: t.meterProvider,
      retryDelayMs: 0,
    });
    await appendEvents(db.sql, 1, event, schema);
    // Registered an hour ago, by the database's clock; every failed attempt since writes the row.
    await db.sql`update ${db.sql(`${schema}.consumers`)} set created_at = now() - interval '1 hour'`;
    await dispatcher.runOnce(); // fails
    await dispatcher.runOnce(); // its pre-check reads the row
    const m = await t.metrics();
    expect(m.value(METRIC.consumerLag, of('stuck-first'))).toBe(1);
    expect(m.value(METRIC.consumerStagnation, of('stuck-first'))).toBeGreaterThanOrEqual(3_600);
  });

  test('two dispatchers of one process on two schemas keep their series apart, a consumer name in both', async () => {
    const t = telemetry();
    const healthy = recordingConsumer('mailer');
    const failing = failingOn('mailer', () => true, { errorPolicy: { maxAttempts: 1 } });
    const one = await registeredDispatcher(db.sql, [healthy.consumer], { meterProvider: t.meterProvider });
    const two = await registeredDispatcher(db.sql, [failing.consumer], { meterProvider: t.meterProvider });
    await appendEvents(db.sql, 2, event, one.schema);
    await appendEvents(db.sql, 2, event, two.schema);
    await drainUntilIdle(one.dispatcher);
    await drainUntilIdle(two.dispatcher);
    const m = await t.metrics();
    const in1 = { [ATTR.schema]: one.schema, [ATTR.consumer]: 'mailer' };
    const in2 = { [ATTR.schema]: two.schema, [ATTR.consumer]: 'mailer' };
    expect([m.value(METRIC.consumerLag, in1), m.value(METRIC.consumerDead, in1)]).toEqual([0, 0]);
    expect([m.value(METRIC.consumerLag, in2), m.value(METRIC.consumerDead, in2)]).toEqual([2, 1]);
    expect(m.value(METRIC.eventsProcessed, in1)).toBe(2);
    expect(m.value(METRIC.eventsProcessed, in2)).toBeUndefined();
  });

  test('a pending gap shows in sluice.gaps.pending, and a rolled-back id counts in sluice.gaps.burnt', async () => {
    const t = telemetry();
    const c = recordingConsumer('burning');
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer], {
      meterProvider: t.meterProvider,
    });
    const holder = await heldTransaction(db.sql);
    await holder.append([event(1)], { schema });
    await appendEvents(db.sql, 1, event, schema);

    await dispatcher.runOnce(); // delivers the visible event, records the hole below it
    await dispatcher.runOnce(); // its pre-check observes the pending range
    let m = await t.metrics();
    expect(m.value(METRIC.gapsPending, of('burning'))).toBe(1);
    expect(m.value(METRIC.gapsOldestAge, of('burning'))).toBeGreaterThanOrEqual(0);
    expect(m.value(METRIC.gapsBurnt)).toBeUndefined();

    await holder.rollback();
    await passUntil(
      dispatcher,
      async () => (await consumerRow(db.sql, schema, 'burning')).gapCount === 0,
      'the burn',
    );
    await dispatcher.runOnce(); // refreshes the gauges
    m = await t.metrics();
    expect(m.value(METRIC.gapsBurnt, of('burning'))).toBe(1);
    expect(m.value(METRIC.gapsPending, of('burning'))).toBe(0);
    expect(m.value(METRIC.eventsLate)).toBeUndefined();
  });

  test('an event committed late below the cursor counts in sluice.events.late', async () => {
    const t = telemetry();
    const c = recordingConsumer('late');
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer], {
      meterProvider: t.meterProvider,
    });
    const holder = await heldTransaction(db.sql);
    const [held] = await holder.append([event(1)], { schema });
    await appendEvents(db.sql, 1, event, schema);
    await dispatcher.runOnce(); // delivers the visible event above the hole
    expect((await t.metrics()).value(METRIC.eventsLate)).toBeUndefined();

    await holder.commit();
    await passUntil(dispatcher, () => c.ids().includes(held!.id), 'the late event');
    const m = await t.metrics();
    expect(m.value(METRIC.eventsLate, of('late'))).toBe(1);
    expect(m.value(METRIC.eventsProcessed, of('late'))).toBe(2);
    expect(m.value(METRIC.gapsBurnt)).toBeUndefined();
  });

  test('a late event counts once in sluice.events.late, on its own lane: the lanes that pass over it count nothing', async () => {
    const t = telemetry();
    const c = recordingConsumer('laned', { lanes: 4 });
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer], {
      meterProvider: t.meterProvider,
    });
    const holder = await heldTransaction(db.sql);
    const [held] = await holder.append([event(1)], { schema });
    await appendEvents(db.sql, 8, event, schema);
    await dispatcher.runOnce(); // every lane passes the hole
    await holder.commit();
    await passUntil(dispatcher, () => c.ids().includes(held!.id), 'the late event');
    await drainUntilIdle(dispatcher);
    expect((await t.metrics()).value(METRIC.eventsLate, { [ATTR.consumer]: 'laned' })).toBe(1);
  });

  test('sluice.listen.connected is 1 while LISTEN is connected and 0 once the dispatcher stops', async () => {
    const schema = await freshSchema(db.sql);
    const t = telemetry();
    const c = recordingConsumer('listening');
    const dispatcher = testDispatcher(db.sql, schema, [c.consumer], {
      listen: true,
      pollIntervalMs: 50,
      meterProvider: t.meterProvider,
    });
    expect((await t.metrics()).value(METRIC.listenConnected)).toBeUndefined();

    await dispatcher.start();
    await until(() => dispatcher.listenConnected, 10_000, 'LISTEN to connect');
    expect((await t.metrics()).value(METRIC.listenConnected)).toBe(1);

    await dispatcher.stop();
    expect((await t.metrics()).value(METRIC.listenConnected)).toBe(0);
  });

  test('turn and handler spans carry the messaging attributes; the handler span links to the appending request', async () => {
    const t = telemetry();
    const c = recordingConsumer('traced');
    const { schema, dispatcher } = await registeredDispatcher(db.sql, [c.consumer], {
      tracerProvider: t.tracerProvider,
    });

    const request = t.tracerProvider.getTracer('test-app').startSpan('POST /orders');
    const [linked] = await context.with(trace.setSpan(context.active(), request), () =>
      appendEvents(db.sql, 1, event, schema),
    );
    request.end();
    const [unlinked] = await appendEvents(db.sql, 1, event, schema); // no active span
    const { traceId, spanId } = request.spanContext();
    expect(linked!.metadata['traceparent']).toBe(`00-${traceId}-${spanId}-01`);
    expect(unlinked!.metadata).not.toHaveProperty('traceparent');

    await drainUntilIdle(dispatcher);
    expect(c.ids()).toEqual([linked!.id, unlinked!.id]);
    expect(c.seen[0]!.metadata['traceparent']).toBe(`00-${traceId}-${spanId}-01`);
    const spans = await t.spans();

    const turn = spans.find((s) => s.name === 'sluice.turn traced' && s.attributes[ATTR.processed] === 2);
    expect(turn).toBeDefined(); // one turn delivered both events
    expect(turn!.kind).toBe(SpanKind.INTERNAL);
    expect(turn!.status.code).not.toBe(SpanStatusCode.ERROR);
    expect(turn!.attributes).toMatchObject({
      [ATTR.messagingSystem]: 'sluice',
      [ATTR.consumer]: 'traced',
      [ATTR.instance]: '*',
      [ATTR.processed]: 2,
    });

    const handlers = spans.filter((s) => s.name === 'process traced');
    expect(handlers.map((s) => s.attributes[ATTR.messagingMessageId])).toEqual([
      linked!.id.toString(),
      unlinked!.id.toString(),
    ]);
    for (const handler of handlers) {
      expect(handler.kind).toBe(SpanKind.CONSUMER);
      expect(handler.attributes).toMatchObject({
        [ATTR.messagingSystem]: 'sluice',
        [ATTR.messagingOperationType]: 'process',
        [ATTR.consumer]: 'traced',
      });
      expect(handler.parentSpanContext?.spanId).toBe(turn!.spanContext().spanId);
      expect(handler.spanContext().traceId).toBe(turn!.spanContext().traceId);
    }
    const [first, second] = handlers;
    expect(first!.links.map((l) => [l.context.traceId, l.context.spanId])).toEqual([[traceId, spanId]]);
    expect(first!.spanContext().traceId).not.toBe(traceId); // a link, not a parent
    expect(second!.links).toEqual([]);
  });

  test("a handler runs under its span: its own spans are children, and an event it appends carries the handler span's traceparent", async () => {
    const t = telemetry();
    const tracer = t.tracerProvider.getTracer('test-app');
    const seen: { consumer: string; active: string | undefined }[] = [];
    const reacting = (name: string, transactional: boolean) => ({
      name,
      transactional,
      types: ['TelemetryTest'],
      handler: async (e: { id: bigint }, ctx: { tx?: unknown }) => {
        seen.push({ consumer: name, active: trace.getActiveSpan()?.spanContext().spanId });
        tracer.startSpan(`work ${name}`).end();
        const reaction = [{ streamId: `r-${e.id}`, type: `Reaction-${name}`, data: {} }];
        if (transactional) await append(ctx.tx as never, reaction, { schema: schemaOf.name });
        else await transaction(db.sql, (tx) => append(tx, reaction, { schema: schemaOf.name }));
      },
    });
    const schemaOf = { name: '' };
    const { schema, dispatcher } = await registeredDispatcher(
      db.sql,
      [reacting('plain', false), reacting('in-tx', true)],
      { tracerProvider: t.tracerProvider },
    );
    schemaOf.name = schema;
    await appendEvents(db.sql, 1, event, schema);
    await drainUntilIdle(dispatcher);
    const spans = await t.spans();
    for (const name of ['plain', 'in-tx']) {
      const handler = spans.find((s) => s.name === `process ${name}`);
      expect(handler, name).toBeDefined();
      const { spanId, traceId } = handler!.spanContext();
      expect(seen.find((s) => s.consumer === name)?.active).toBe(spanId);
      const work = spans.find((s) => s.name === `work ${name}`);
      expect(work?.parentSpanContext?.spanId).toBe(spanId);
      const [reaction] = await db.sql<{ metadata: { traceparent?: string } }[]>`
        select metadata from ${db.sql(`${schema}.events`)} where type = ${`Reaction-${name}`}`;
      expect(reaction?.metadata.traceparent).toBe(`00-${traceId}-${spanId}-01`);
    }
  });

  test('a pass woken by a commit inside a request runs outside the request: the turn has no parent, the turn and the handler link to the request', async () => {
    const schema = await freshSchema(db.sql);
    const t = telemetry();
    const c = recordingConsumer('woken');
    // No LISTEN and a poll far away: only the in-process wake-up of transaction()'s commit, which
    // runs inside the request's async context, can start the pass that delivers the event.
    const dispatcher = testDispatcher(db.sql, schema, [c.consumer], {
      tracerProvider: t.tracerProvider,
      pollIntervalMs: 600_000,
    });
    await dispatcher.start();
    await dispatcher.drain(); // the pass start() requested finds nothing

    const request = t.tracerProvider.getTracer('test-app').startSpan('POST /orders');
    const [appended] = await context.with(trace.setSpan(context.active(), request), () =>
      transaction(db.sql, (tx) => append(tx, [event(1)], { schema })),
    );
    await until(() => c.ids().length === 1, 10_000, 'the woken pass to deliver the event');
    await dispatcher.drain();
    request.end();
    expect(c.ids()).toEqual([appended!.id]);

    const { traceId, spanId } = request.spanContext();
    const spans = await t.spans();
    const turns = spans.filter((s) => s.name === 'sluice.turn woken');
    expect(turns.length).toBeGreaterThanOrEqual(1);
    for (const turn of turns) {
      expect(turn.parentSpanContext).toBeUndefined();
      expect(turn.spanContext().traceId).not.toBe(traceId);
    }
    const handlers = spans.filter((s) => s.name === 'process woken');
    expect(handlers).toHaveLength(1);
    const [handler] = handlers;
    expect(handler!.links.map((l) => [l.context.traceId, l.context.spanId])).toEqual([[traceId, spanId]]);
    expect(handler!.spanContext().traceId).not.toBe(traceId);
    const turn = turns.find((s) => s.spanContext().spanId === handler!.parentSpanContext?.spanId);
    expect(turn).toBeDefined(); // the handler's parent is its turn, not the request
    // The turn that delivered the event links to the request, once.
    expect(turn!.links.map((l) => [l.context.traceId, l.context.spanId])).toEqual([[traceId, spanId]]);
    // Nothing the dispatcher did was recorded as part of the request's trace.
    expect(spans.filter((s) => s.spanContext().traceId === traceId).map((s) => s.name)).toEqual([
      'POST /orders',
    ]);
  });
});

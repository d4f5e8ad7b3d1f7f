import { metrics, type Attributes, type MeterProvider } from '@opentelemetry/api';
import { ATTR, METRIC } from './attributes.js';

/** The latest known state of one consumer, observed by gauges (no query runs just for telemetry). */
export interface ConsumerGauges {
  lagEvents: number;
  lagSeconds: number;
  stagnationSeconds: number;
  gapRanges: number;
  /**
   * When the oldest pending gap range was observed, on this process's performance.now() clock;
   * null without one. Its age is taken when the gauge is read, so it grows between passes (and
   * while a pass reuses a standing pre-check) without the gauge being set again.
   */
  oldestGapSinceMs: number | null;
  dead: boolean;
}

export interface DispatcherMetrics {
  processed(consumer: string, instance: string, count: number): void;
  failed(consumer: string, instance: string, count: number): void;
  late(consumer: string, instance: string, count: number): void;
  burnt(consumer: string, instance: string, ids: number): void;
  handlerDuration(
    consumer: string,
    instance: string,
    seconds: number,
    outcome: 'ok' | 'error' | 'timeout',
  ): void;
  pass(outcome: 'ok' | 'idle' | 'precheck-failed' | 'failed'): void;
  rearmExhausted(consumer: string, instance: string): void;
  /** A missing consumer row was re-created by this process ('collected': restored where it was). */
  reregistered(consumer: string, instance: string, from: 'collected' | 'start-from'): void;
  /** A turn parked `keys` keys anew and set `events` events aside under parked keys. */
  parked(consumer: string, instance: string, keys: number, events: number): void;
  setConsumer(consumer: string, instance: string, gauges: ConsumerGauges): void;
  /**
   * The consumer rows this process reports now: the gauges of any other (a lane retired by a change
   * of lane count, a version retired by a rebuild) are no longer exported, frozen at their last value.
   */
  keepConsumers(rows: Iterable<{ readonly name: string; readonly instanceId: string }>): void;
  /** A rebuild of `consumer` in progress: its version and events behind the head; null: none. */
  setRebuildLag(consumer: string, rebuild: { version: number; lagEvents: bigint } | null): void;
  setListenConnected(connected: boolean): void;
}

/**
 * Bucket boundaries of the handler-duration histogram, in seconds: 1-2.5-5 steps from 1 ms (a
 * handler that writes one row) to 10 s (a slow remote call), then 30 s, the default
 * `handlerTimeoutMs`, so calls close to the limit stand apart and calls cut off by it (a little
 * over 30 s) land above every boundary. The SDK's default boundaries (0 to 10 000) suit
 * milliseconds: in seconds every call would fall in the first bucket. Given as the instrument's
 * advice, they apply under any SDK that honours advice, without a View; a View still overrides them.
 */
export const HANDLER_DURATION_BOUNDARIES_SECONDS: readonly number[] = Object.freeze([
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
]);

/**
 * Instruments from `meterProvider` (or the global one: a no-op without an SDK). Every series
 * carries `schema`: two dispatchers of one process on two schemas (two plugin instances, say) may
 * run consumers of one name, and their series must not overwrite or add up into each other.
 */
export function createMetrics(meterProvider: MeterProvider | undefined, schema: string): DispatcherMetrics {
  const meter = (meterProvider ?? metrics.getMeterProvider()).getMeter('@sluice/core');
  const processed = meter.createCounter(METRIC.eventsProcessed, {
    description: 'Events handled successfully',
    unit: '{event}',
  });
  const failed = meter.createCounter(METRIC.eventsFailed, {
    description: 'Handler failures',
    unit: '{event}',
  });
  const late = meter.createCounter(METRIC.eventsLate, {
    description: 'Events delivered below the cursor because they committed late (gap deliveries)',
    unit: '{event}',
  });
  const burnt = meter.createCounter(METRIC.gapsBurnt, {
    description: 'Ids given up for good: proven never to commit',
    unit: '{id}',
  });
  const handlerDuration = meter.createHistogram(METRIC.handlerDuration, {
    description: 'Handler call duration',
    unit: 's',
    advice: { explicitBucketBoundaries: [...HANDLER_DURATION_BOUNDARIES_SECONDS] },
  });
  const passes = meter.createCounter(METRIC.passes, {
    description: 'Dispatcher passes by outcome',
    unit: '{pass}',
  });
  const rearmExhausted = meter.createCounter(METRIC.rearmExhausted, {
    description: 'Dead consumers whose automatic re-arms are used up (once per consumer and process)',
    unit: '{consumer}',
  });

  const keysParked = meter.createCounter(METRIC.keysParked, {
    description: 'Keys parked: an event used up its attempts and its key was set aside (errorPolicy.parkKey)',
    unit: '{key}',
  });
  const eventsParked = meter.createCounter(METRIC.eventsParked, {
    description: 'Events set aside under a parked key',
    unit: '{event}',
  });

  const reregistered = meter.createCounter(METRIC.consumerReregistered, {
    description: 'Consumer rows this process found missing (collected as stale, or deleted) and re-created',
    unit: '{consumer}',
  });

  const state = new Map<string, { attributes: Attributes; gauges: ConsumerGauges }>();
  let listenConnected: number | undefined;
  const gauge = (name: string, description: string, unit: string, pick: (g: ConsumerGauges) => number) => {
    meter.createObservableGauge(name, { description, unit }).addCallback((result) => {
      for (const { attributes, gauges } of state.values()) result.observe(pick(gauges), attributes);
    });
  };
  gauge(
    METRIC.consumerLag,
    'Events between the consumer cursor and the log head',
    '{event}',
    (g) => g.lagEvents,
  );
  gauge(
    METRIC.consumerLagDuration,
    'Age of the oldest event the consumer has not reached',
    's',
    (g) => g.lagSeconds,
  );
  gauge(
    METRIC.consumerStagnation,
    'Time since the consumer last advanced while behind',
    's',
    (g) => g.stagnationSeconds,
  );
  gauge(METRIC.gapsPending, 'Pending gap ranges', '{range}', (g) => g.gapRanges);
  gauge(METRIC.gapsOldestAge, 'Age of the oldest pending gap range', 's', (g) =>
    g.oldestGapSinceMs === null ? 0 : Math.max(0, (performance.now() - g.oldestGapSinceMs) / 1000),
  );
  // Counts (of dead consumers, of LISTEN connections), not the unit `1`: exporters that follow
  // OpenTelemetry's Prometheus rules would name a gauge in `1` `…_ratio`, which these are not.
  gauge(METRIC.consumerDead, '1 while the consumer is dead', '{consumer}', (g) => (g.dead ? 1 : 0));
  const rebuilds = new Map<string, { attributes: Attributes; lag: number }>();
  meter
    .createObservableGauge(METRIC.rebuildLag, {
      description: 'Events between a rebuilding version of the consumer and the log head',
      unit: '{event}',
    })
    .addCallback((result) => {
      for (const { attributes, lag } of rebuilds.values()) result.observe(lag, attributes);
    });
  meter
    .createObservableGauge(METRIC.listenConnected, {
      description: '1 while LISTEN is connected',
      unit: '{connection}',
    })
    .addCallback((result) => {
      if (listenConnected !== undefined) result.observe(listenConnected, { [ATTR.schema]: schema });
    });

  // Recorded for every handler call: the attributes are made once per consumer, instance and outcome.
  const durations = new Map<string, Attributes>();
  const durationAttributes = (consumer: string, instance: string, outcome: string): Attributes => {
    const key = `${consumer}\u0000${instance}\u0000${outcome}`;
    let attributes = durations.get(key);
    if (!attributes) {
      attributes = Object.freeze({ ...attrs(consumer, instance), [ATTR.handlerOutcome]: outcome });
      durations.set(key, attributes);
    }
    return attributes;
  };
  const attrs = (consumer: string, instance: string): Attributes => ({
    [ATTR.schema]: schema,
    [ATTR.consumer]: consumer,
    [ATTR.instance]: instance,
  });
  return {
    processed(c, i, n) {
      if (n > 0) processed.add(n, attrs(c, i));
    },
    failed(c, i, n) {
      if (n > 0) failed.add(n, attrs(c, i));
    },
    late(c, i, n) {
      if (n > 0) late.add(n, attrs(c, i));
    },
    burnt(c, i, n) {
      if (n > 0) burnt.add(n, attrs(c, i));
    },
    handlerDuration(c, i, seconds, outcome) {
      handlerDuration.record(seconds, durationAttributes(c, i, outcome));
    },
    pass(outcome) {
      passes.add(1, { [ATTR.schema]: schema, [ATTR.passOutcome]: outcome });
    },
    rearmExhausted(c, i) {
      rearmExhausted.add(1, attrs(c, i));
    },
    parked(c, i, keys, events) {
      if (keys > 0) keysParked.add(keys, attrs(c, i));
      if (events > 0) eventsParked.add(events, attrs(c, i));
    },
    reregistered(c, i, from) {
      reregistered.add(1, { ...attrs(c, i), [ATTR.reregisteredFrom]: from });
    },
    setConsumer(c, i, gauges) {
      state.set(`${c}\u0000${i}`, { attributes: attrs(c, i), gauges });
    },
    keepConsumers(rows) {
      const kept = new Set<string>();
      for (const row of rows) kept.add(`${row.name}\u0000${row.instanceId}`);
      for (const key of state.keys()) if (!kept.has(key)) state.delete(key);
    },
    setRebuildLag(c, rebuild) {
      if (rebuild === null) rebuilds.delete(c);
      else {
        rebuilds.set(c, {
          attributes: { [ATTR.schema]: schema, [ATTR.consumer]: c, [ATTR.version]: rebuild.version },
          lag: Number(rebuild.lagEvents),
        });
      }
    },
    setListenConnected(connected) {
      listenConnected = connected ? 1 : 0;
    },
  };
}

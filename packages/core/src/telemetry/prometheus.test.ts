// What Prometheus users see of Sluice's metrics: every instrument follows the naming rules of
// attributes.ts, @opentelemetry/exporter-prometheus exposes the names docs/operating.md lists, and
// `promtool check metrics` (Debian's prometheus package) accepts that exposition.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import {
  createNoopMeter,
  type Meter,
  type MeterProvider,
  type MetricOptions,
  type ObservableCallback,
} from '@opentelemetry/api';
import { PrometheusExporter, PrometheusSerializer } from '@opentelemetry/exporter-prometheus';
import { MeterProvider as SdkMeterProvider } from '@opentelemetry/sdk-metrics';
import { describe, expect, onTestFinished, test } from 'vitest';
import { ATTR, METRIC } from './attributes.js';
import { createMetrics, type ConsumerGauges } from './metrics.js';

const PROMTOOL = process.env['PROMTOOL_PATH'] ?? 'promtool';
const hasPromtool = spawnSync(PROMTOOL, ['--version']).status === 0;
// CI installs the prometheus package and sets SLUICE_REQUIRE_PROMETHEUS: there promtool must run.
if (!hasPromtool && process.env['SLUICE_REQUIRE_PROMETHEUS']) {
  throw new Error(`no ${PROMTOOL}: install Debian's prometheus package (or set PROMTOOL_PATH)`);
}

interface Created {
  kind: string;
  name: string;
  options: MetricOptions;
}

/** A real SDK meter provider that also records every instrument created on it, with its options. */
function recordingProvider(): { provider: MeterProvider; created: Created[]; exporter: PrometheusExporter } {
  const exporter = new PrometheusExporter({ preventServerStart: true });
  const sdk = new SdkMeterProvider({ readers: [exporter] });
  onTestFinished(() => sdk.shutdown());
  const created: Created[] = [];
  const note = (kind: string, name: string, options: MetricOptions = {}) => {
    created.push({ kind, name, options });
  };
  const provider: MeterProvider = {
    getMeter(name, version, options): Meter {
      const meter = sdk.getMeter(name, version, options);
      return {
        createCounter: (n, o) => (note('counter', n, o), meter.createCounter(n, o)),
        createUpDownCounter: (n, o) => (note('updowncounter', n, o), meter.createUpDownCounter(n, o)),
        createGauge: (n, o) => (note('gauge', n, o), meter.createGauge(n, o)),
        createHistogram: (n, o) => (note('histogram', n, o), meter.createHistogram(n, o)),
        createObservableGauge: (n, o) => (note('gauge', n, o), meter.createObservableGauge(n, o)),
        createObservableCounter: (n, o) => (note('counter', n, o), meter.createObservableCounter(n, o)),
        createObservableUpDownCounter: (n, o) => (
          note('updowncounter', n, o),
          meter.createObservableUpDownCounter(n, o)
        ),
        addBatchObservableCallback: (callback, observables) => {
          meter.addBatchObservableCallback(callback, observables);
        },
        removeBatchObservableCallback: (callback, observables) => {
          meter.removeBatchObservableCallback(callback, observables);
        },
      };
    },
  };
  return { provider, created, exporter };
}

/** Rows of the metrics table in docs/operating.md: OpenTelemetry name, unit, Prometheus name. */
function documented(): { name: string; unit: string; prometheus: string }[] {
  const docs = readFileSync(new URL('../../../../docs/operating.md', import.meta.url), 'utf8');
  const rows = [...docs.matchAll(/^\| `(sluice\.[^`]+)` +\| `([^`]+)` +\| `([^`]+)` +\|/gm)];
  return rows.map(([, name, unit, prometheus]) => ({ name: name!, unit: unit!, prometheus: prometheus! }));
}

const gauges: ConsumerGauges = {
  lagEvents: 3,
  lagSeconds: 1.5,
  stagnationSeconds: 0.5,
  gapRanges: 1,
  oldestGapSinceMs: performance.now(),
  dead: true,
};

/** One value on every instrument, so each shows in an exposition. */
function recordEverything(provider: MeterProvider): void {
  const m = createMetrics(provider, 'sluice');
  m.processed('mailer', '*', 2);
  m.failed('mailer', '*', 1);
  m.late('mailer', '*', 1);
  m.burnt('mailer', '*', 1);
  m.handlerDuration('mailer', '*', 0.012, 'ok');
  m.pass('ok');
  m.rearmExhausted('mailer', '*');
  m.reregistered('mailer', '*', 'collected');
  m.parked('mailer', '*', 1, 2);
  m.setConsumer('mailer', '*', gauges);
  m.setListenConnected(true);
  m.setRebuildLag('mailer', { version: 2, lagEvents: 40n });
}

describe('Sluice metrics as Prometheus sees them', () => {
  test('every instrument follows the naming rules: seconds end in _seconds, counts carry a {…} unit, no total', () => {
    const { provider, created } = recordingProvider();
    createMetrics(provider, 'sluice');
    expect(created.map((c) => c.name).sort()).toEqual(Object.values(METRIC).sort());
    for (const { kind, name, options } of created) {
      expect(name, 'dotted lower-case words').toMatch(/^sluice(\.[a-z][a-z0-9_]*)+$/);
      // Exporters add _total to counters: a name ending in total would read total_total or lose it.
      expect(name).not.toMatch(/total$/);
      if (options.unit === 's') {
        // exporter-prometheus adds no unit suffix: the name carries it, so both kinds of exporter agree.
        expect(name, `${name} is in seconds`).toMatch(/_seconds$/);
      } else {
        // A count's annotation adds no suffix; the unit `1` would become `_ratio` on gauges.
        expect(options.unit, `${name}'s unit`).toMatch(/^\{[a-z_]+\}$/);
        expect(name, `${name} is not in seconds`).not.toMatch(/seconds/);
      }
      if (kind === 'histogram') {
        expect(options.advice?.explicitBucketBoundaries, `${name}'s bucket advice`).toBeDefined();
      }
    }
  });

  test('docs/operating.md lists every metric with its unit and the name exporter-prometheus exposes', async () => {
    const { provider, created, exporter } = recordingProvider();
    recordEverything(provider);
    const { resourceMetrics, errors } = await exporter.collect();
    expect(errors).toEqual([]);
    const exposition = new PrometheusSerializer().serialize(resourceMetrics);
    const families = [...exposition.matchAll(/^# TYPE (sluice_\S+) /gm)].map(([, name]) => name!);
    const exposed = new Map(
      resourceMetrics.scopeMetrics
        .flatMap((s) => s.metrics)
        .map((m, i) => [m.descriptor.name, families[i]] as const),
    );
    expect(exposed.size, 'every instrument has a value in this test').toBe(created.length);
    const byName = (a: { name: string }, b: { name: string }) => a.name.localeCompare(b.name);
    expect(documented().sort(byName)).toEqual(
      created
        .map(({ name, options }) => ({ name, unit: options.unit, prometheus: exposed.get(name) }))
        .sort(byName),
    );
  });

  test('the gauges of a row this process no longer reports (a retired lane) are no longer observed', () => {
    // What the gauges' callbacks observe. (The SDK's exporters keep showing an attribute set a
    // callback stopped observing, frozen, against the specification's advice; a compliant SDK drops it.)
    const callbacks = new Map<string, ObservableCallback>();
    const noop = createNoopMeter();
    const meter = Object.assign(Object.create(noop) as Meter, {
      createObservableGauge: (name: string) => ({
        addCallback: (callback: ObservableCallback) => callbacks.set(name, callback),
        removeCallback: () => undefined,
      }),
    });
    const m = createMetrics({ getMeter: () => meter }, 'sluice');
    const lanesOfLag = () => {
      const lanes: unknown[] = [];
      void callbacks.get(METRIC.consumerLag)?.({
        observe: (_v, attributes) => lanes.push(attributes?.[ATTR.instance]),
      });
      return lanes;
    };
    for (const lane of ['*0/2', '*1/2']) m.setConsumer('mailer', lane, gauges);
    m.keepConsumers(['*0/2', '*1/2'].map((instanceId) => ({ name: 'mailer', instanceId })));
    expect(lanesOfLag()).toEqual(['*0/2', '*1/2']);
    // The lane count became 3: the old lanes' gauges go, not frozen at their last value.
    const now = ['*0/3', '*1/3', '*2/3'];
    for (const lane of now) m.setConsumer('mailer', lane, gauges);
    m.keepConsumers(now.map((instanceId) => ({ name: 'mailer', instanceId })));
    expect(lanesOfLag()).toEqual(now);
  });

  test.skipIf(!hasPromtool)(
    'promtool check metrics accepts the exposition of exporter-prometheus',
    async () => {
      const { provider, exporter } = recordingProvider();
      recordEverything(provider);
      const { resourceMetrics } = await exporter.collect();
      const exposition = new PrometheusSerializer().serialize(resourceMetrics);
      const lint = spawnSync(PROMTOOL, ['check', 'metrics'], { input: exposition, encoding: 'utf8' });
      expect({ status: lint.status, output: lint.stdout + lint.stderr }).toEqual({ status: 0, output: '' });
      // The handler histogram's buckets are the advised seconds, not the SDK's millisecond defaults.
      expect(exposition).toMatch(/^sluice_handler_duration_seconds_bucket\{[^}]*le="0\.025"\} 1$/m);
      expect(exposition).toMatch(/^sluice_handler_duration_seconds_bucket\{[^}]*le="0\.01"\} 0$/m);
    },
  );
});

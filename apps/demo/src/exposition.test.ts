// The demo's /metrics writer, on metrics recorded through a real OpenTelemetry SDK: valid
// OpenMetrics (by the strict reader of openmetrics-check.ts) and valid Prometheus text (by
// `promtool check metrics`, Debian's prometheus package), with the same names in both.
import { spawnSync } from 'node:child_process';
import { PrometheusExporter, PrometheusSerializer } from '@opentelemetry/exporter-prometheus';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { describe, expect, onTestFinished, test } from 'vitest';
import { canonical, negotiate, serialize } from './exposition.js';
import { checkOpenMetrics } from './openmetrics-check.js';

// promtool from Debian's prometheus package, on PATH. CI cannot skip these tests unnoticed: it
// installs the package, and .ci/demo-smoke.sh and the end-to-end tests fail without it.
const PROMTOOL = 'promtool';
const hasPromtool = spawnSync(PROMTOOL, ['--version']).status === 0;

class Reader extends MetricReader {
  protected override onShutdown(): Promise<void> {
    return Promise.resolve();
  }
  protected override onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
}

/** A collection with every kind of instrument, awkward labels and text included. */
async function collection() {
  const reader = new Reader();
  const exporter = new PrometheusExporter({ preventServerStart: true });
  const provider = new MeterProvider({
    resource: resourceFromAttributes({ 'service.name': 'shop', 'service.instance.id': 'host:3000' }),
    readers: [reader, exporter],
  });
  onTestFinished(() => provider.shutdown());
  const meter = provider.getMeter('@shop/core', '1.2.3');
  const orders = meter.createCounter('shop.orders', {
    description: 'Orders "placed"\nso far',
    unit: '{order}',
  });
  orders.add(3, { 'shop.region': 'eu', 'shop.note': 'a "quoted" \\ back\nslash' });
  orders.add(1, { 'shop.region': 'us' });
  const duration = meter.createHistogram('shop.checkout.duration_seconds', {
    description: 'Checkout duration',
    unit: 's',
    advice: { explicitBucketBoundaries: [0.001, 0.01, 0.1, 1, 10, 1_000_000] },
  });
  for (const seconds of [0.0005, 0.004, 0.004, 0.2, 3, 42])
    duration.record(seconds, { 'shop.outcome': 'ok' });
  duration.record(0.05, { 'shop.outcome': 'error' });
  meter
    .createObservableGauge('shop.queue.age', { description: 'Oldest waiting', unit: 's' })
    .addCallback((r) => {
      r.observe(1.5);
    });
  meter.createObservableGauge('shop.cache.hit', { unit: '1' }).addCallback((r) => {
    r.observe(0.75);
  });
  meter.createUpDownCounter('shop.carts.open', { unit: '{cart}' }).add(4);
  meter.createCounter('shop.bytes.sent', { unit: 'By' }).add(1024);
  const { resourceMetrics, errors } = await reader.collect();
  expect(errors).toEqual([]);
  return { resourceMetrics, exporter };
}

const families = (text: string) =>
  [...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map(([, n, t]) => `${n} ${t}`);

describe('negotiate', () => {
  test.each([
    [
      'Prometheus 2',
      'application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1',
      'openmetrics',
    ],
    ['OpenMetrics without a version', 'application/openmetrics-text', 'openmetrics'],
    ['curl', '*/*', 'text'],
    ['no Accept header', undefined, 'text'],
    ['a browser', 'text/html,application/xhtml+xml,*/*;q=0.8', 'text'],
    ['the text format', 'text/plain; version=0.0.4', 'text'],
    ['text preferred', 'application/openmetrics-text; version=1.0.0; q=0.4, text/plain; q=0.5', 'text'],
    ['OpenMetrics refused', 'application/openmetrics-text; q=0, */*', 'text'],
    ['an OpenMetrics version not served', 'application/openmetrics-text; version=2.0.0', 'text'],
  ])('%s', (_, accept, format) => {
    expect(negotiate(accept)).toBe(format);
  });
});

test("bucket boundaries in OpenMetrics' canonical form", () => {
  const values = [
    0, 0.001, 0.0025, 0.01, 0.1, 0.95, 1, 1.7, 10, 30, 1e-10, 1e-9, 1e-5, 1e-4, 1e5, 1e6, 1e10, 1.1e23,
  ];
  expect(values.map(canonical)).toEqual([
    '0.0',
    '0.001',
    '0.0025',
    '0.01',
    '0.1',
    '0.95',
    '1.0',
    '1.7',
    '10.0',
    '30.0',
    '1e-10',
    '1e-09',
    '1e-05',
    '0.0001',
    '100000.0',
    '1e+06',
    '1e+10',
    '1.1e+23',
  ]);
  expect(canonical(Infinity)).toBe('+Inf');
});

describe('serialize', () => {
  test('OpenMetrics: valid by the strict reader, unit suffixes and UNIT lines from UCUM units, target info first', async () => {
    const { resourceMetrics } = await collection();
    const text = serialize(resourceMetrics, 'openmetrics');
    expect(checkOpenMetrics(text)).toEqual([]);
    expect(families(text)).toEqual([
      'target info',
      'shop_orders counter',
      'shop_checkout_duration_seconds histogram',
      'shop_queue_age_seconds gauge',
      'shop_cache_hit_ratio gauge',
      'shop_carts_open gauge',
      'shop_bytes_sent_bytes counter',
    ]);
    expect(text).toMatch(/^target_info\{[^}]*service_instance_id="host:3000",service_name="shop"[^}]*\} 1$/m);
    expect(text).toContain('# UNIT shop_checkout_duration_seconds seconds\n');
    expect(text).toContain('# UNIT shop_queue_age_seconds seconds\n');
    expect(text).toContain('# UNIT shop_cache_hit_ratio ratio\n');
    expect(text).toContain('# UNIT shop_bytes_sent_bytes bytes\n');
    expect(text).not.toMatch(/^# UNIT shop_orders/m); // {order} is an annotation, not a unit
    expect(text).toContain('# HELP shop_cache_hit_ratio shop.cache.hit\n'); // no description given
    expect(text).toContain('# HELP shop_orders Orders \\"placed\\"\\nso far\n');
    expect(text).toContain(
      'shop_orders_total{shop_note="a \\"quoted\\" \\\\ back\\nslash",shop_region="eu",otel_scope_name="@shop/core",otel_scope_version="1.2.3"} 3\n',
    );
    const ok = 'shop_outcome="ok",otel_scope_name="@shop/core",otel_scope_version="1.2.3"';
    expect(text).toContain(
      [
        `shop_checkout_duration_seconds_bucket{${ok},le="0.001"} 1`,
        `shop_checkout_duration_seconds_bucket{${ok},le="0.01"} 3`,
        `shop_checkout_duration_seconds_bucket{${ok},le="0.1"} 3`,
        `shop_checkout_duration_seconds_bucket{${ok},le="1.0"} 4`,
        `shop_checkout_duration_seconds_bucket{${ok},le="10.0"} 5`,
        `shop_checkout_duration_seconds_bucket{${ok},le="1e+06"} 6`,
        `shop_checkout_duration_seconds_bucket{${ok},le="+Inf"} 6`,
        `shop_checkout_duration_seconds_count{${ok}} 6`,
        `shop_checkout_duration_seconds_sum{${ok}} 45.2085`,
      ].join('\n'),
    );
    expect(text.endsWith('\n# EOF\n')).toBe(true);
  });

  test('the text format: same sample names, counters typed under their _total name, no UNIT or EOF', async () => {
    const { resourceMetrics } = await collection();
    const text = serialize(resourceMetrics, 'text');
    const openMetrics = serialize(resourceMetrics, 'openmetrics');
    const samples = (t: string) => t.split('\n').filter((line) => line !== '' && !line.startsWith('#'));
    expect(samples(text)).toEqual(samples(openMetrics));
    expect(families(text)).toContain('shop_orders_total counter');
    expect(families(text)).toContain('target_info gauge');
    expect(text).not.toMatch(/^# (UNIT|EOF)/m);
    // The text format escapes only backslashes and newlines in HELP.
    expect(text).toContain('# HELP shop_orders_total Orders "placed"\\nso far\n');
  });

  test.skipIf(!hasPromtool)('promtool check metrics accepts the text format', async () => {
    const { resourceMetrics } = await collection();
    const lint = spawnSync(PROMTOOL, ['check', 'metrics'], {
      input: serialize(resourceMetrics, 'text'),
      encoding: 'utf8',
    });
    expect({ status: lint.status, output: lint.stdout + lint.stderr }).toEqual({ status: 0, output: '' });
  });

  test('names whose unit is already their suffix come out as exporter-prometheus writes them', async () => {
    const { resourceMetrics, exporter } = await collection();
    const theirs = new PrometheusSerializer().serialize((await exporter.collect()).resourceMetrics);
    const ours = serialize(resourceMetrics, 'text');
    const named = (t: string, name: string) => families(t).find((f) => f.startsWith(`${name} `));
    for (const name of ['shop_orders_total', 'shop_checkout_duration_seconds', 'shop_carts_open']) {
      expect(named(ours, name)).toBe(named(theirs, name));
    }
    // Where the name lacks its unit, exporter-prometheus leaves it out; Sluice's names never lack it.
    expect(named(theirs, 'shop_queue_age')).toBe('shop_queue_age gauge');
    expect(named(ours, 'shop_queue_age_seconds')).toBe('shop_queue_age_seconds gauge');
  });
});

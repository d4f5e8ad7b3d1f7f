// The strict OpenMetrics reader the exposition tests rely on: it accepts the specification's own
// examples and names each rule a broken exposition breaks (so a passing exposition test means
// something).
import { PrometheusExporter, PrometheusSerializer } from '@opentelemetry/exporter-prometheus';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { describe, expect, onTestFinished, test } from 'vitest';
import { checkOpenMetrics } from './openmetrics-check.js';

const valid = `# TYPE acme_http_router_request_seconds summary
# UNIT acme_http_router_request_seconds seconds
# HELP acme_http_router_request_seconds Latency though all of ACME's HTTP request router.
acme_http_router_request_seconds_sum{path="/api/v1",method="GET"} 9036.32
acme_http_router_request_seconds_count{path="/api/v1",method="GET"} 807283.0
acme_http_router_request_seconds_created{path="/api/v1",method="GET"} 1605281325.0
acme_http_router_request_seconds_sum{path="/api/v2",method="POST"} 479.3
acme_http_router_request_seconds_count{path="/api/v2",method="POST"} 34.0
acme_http_router_request_seconds_created{path="/api/v2",method="POST"} 1605281325.0
# TYPE go_goroutines gauge
# HELP go_goroutines Number of goroutines that currently exist.
go_goroutines 69
# TYPE process_cpu_seconds counter
# UNIT process_cpu_seconds seconds
# HELP process_cpu_seconds Total user and system CPU time spent in seconds.
process_cpu_seconds_total 4.20072246e+06
# TYPE foo histogram
foo_bucket{le="0.0"} 0
foo_bucket{le="1e-05"} 0
foo_bucket{le="0.0001"} 5
foo_bucket{le="0.1"} 8
foo_bucket{le="1.0"} 10
foo_bucket{le="10.0"} 11
foo_bucket{le="100000.0"} 11
foo_bucket{le="1e+06"} 15
foo_bucket{le="1e+23"} 16
foo_bucket{le="1.1e+23"} 17
foo_bucket{le="+Inf"} 17
foo_count 17
foo_sum 324789.3
foo_created 1520430000.123
# TYPE build info
build_info{name="pretty name",version="8.2.7"} 1
# TYPE escaped gauge
# HELP escaped Some text and \\n some \\" escaping
escaped{a="x",b="escaping\\" example \\n "} 0
# EOF
`;

/** `valid` with one line replaced (or removed when `by` is undefined). */
const breaking = (line: string, by?: string) => {
  expect(valid).toContain(`${line}\n`);
  return valid.replace(`${line}\n`, by === undefined ? '' : `${by}\n`);
};

describe('checkOpenMetrics', () => {
  test("accepts the specification's examples", () => {
    expect(checkOpenMetrics(valid)).toEqual([]);
    expect(checkOpenMetrics('# EOF')).toEqual([]);
  });

  test.each([
    ['no # EOF', breaking('# EOF'), 'does not end with "# EOF"'],
    ['text after # EOF', `${valid}go_goroutines 1\n`, 'does not end with "# EOF"'],
    ['a comment', breaking('go_goroutines 69', '# a comment\ngo_goroutines 69'), 'may begin with #'],
    [
      'a unit that is not the suffix',
      breaking('# UNIT process_cpu_seconds seconds', '# UNIT process_cpu_seconds s'),
      'is not a suffix',
    ],
    [
      'an annotation as unit',
      breaking('# UNIT process_cpu_seconds seconds', '# UNIT process_cpu_seconds {event}'),
      'invalid unit',
    ],
    [
      'a second TYPE',
      breaking('# TYPE go_goroutines gauge', '# TYPE go_goroutines gauge\n# TYPE go_goroutines gauge'),
      'second TYPE',
    ],
    [
      'an unknown type',
      breaking('# TYPE go_goroutines gauge', '# TYPE go_goroutines untyped'),
      'unknown type',
    ],
    [
      'a counter sample without _total',
      breaking('process_cpu_seconds_total 4.20072246e+06', 'process_cpu_seconds 4.20072246e+06'),
      'appears again',
    ],
    [
      'a counter family named with _total',
      breaking('# TYPE process_cpu_seconds counter', '# TYPE process_cpu_seconds_total counter'),
      'appears again',
    ],
    [
      'a negative counter',
      breaking('process_cpu_seconds_total 4.20072246e+06', 'process_cpu_seconds_total -1'),
      'non-negative',
    ],
    ['metadata after samples', `${breaking('# EOF')}# HELP go_goroutines again\n# EOF\n`, 'appears again'],
    ['buckets out of order', breaking('foo_bucket{le="0.1"} 8', 'foo_bucket{le="0.00001"} 8'), 'not sorted'],
    ['a non-canonical le', breaking('foo_bucket{le="1.0"} 10', 'foo_bucket{le="1"} 10'), 'not canonical'],
    ['buckets that decrease', breaking('foo_bucket{le="10.0"} 11', 'foo_bucket{le="10.0"} 9'), 'cumulative'],
    ['no +Inf bucket', breaking('foo_bucket{le="+Inf"} 17'), 'no +Inf bucket'],
    [
      'a count that is not the +Inf bucket',
      breaking('foo_count 17', 'foo_count 16'),
      'differs from its +Inf bucket',
    ],
    ['a sum without a count', breaking('foo_count 17'), 'together or not at all'],
    [
      'an le label on the count',
      breaking('foo_count 17', 'foo_count{le="1.0"} 17'),
      'must not have an le label',
    ],
    [
      'interleaved MetricPoints',
      breaking(
        'acme_http_router_request_seconds_created{path="/api/v2",method="POST"} 1605281325.0',
        'acme_http_router_request_seconds_created{path="/api/v2",method="POST"} 1605281325.0\nacme_http_router_request_seconds_sum{path="/api/v1",method="GET"} 1',
      ),
      'interleaved',
    ],
    ['a duplicate label', breaking('go_goroutines 69', 'go_goroutines{a="1",a="2"} 69'), 'label a twice'],
    ['a reserved label name', breaking('go_goroutines 69', 'go_goroutines{__name__="x"} 69'), 'reserved'],
    ['a trailing comma', breaking('go_goroutines 69', 'go_goroutines{a="1",} 69'), 'comma before }'],
    [
      'an unescaped quote in HELP',
      breaking(
        '# HELP go_goroutines Number of goroutines that currently exist.',
        '# HELP go_goroutines a "quote"',
      ),
      'unescaped double quote',
    ],
    ['a bad number', breaking('go_goroutines 69', 'go_goroutines 6,9'), 'invalid number'],
    [
      'an info other than 1',
      breaking(
        'build_info{name="pretty name",version="8.2.7"} 1',
        'build_info{name="pretty name",version="8.2.7"} 2',
      ),
      'must be 1',
    ],
  ])('rejects %s', (_, exposition, problem) => {
    const problems = checkOpenMetrics(exposition);
    expect(problems.join('\n')).toContain(problem);
  });

  test('rejects what @opentelemetry/exporter-prometheus writes: {…} units, counter families named _total, no # EOF', async () => {
    const exporter = new PrometheusExporter({ preventServerStart: true });
    const provider = new MeterProvider({ readers: [exporter] });
    onTestFinished(() => provider.shutdown());
    const meter = provider.getMeter('check');
    meter.createCounter('shop.orders', { unit: '{order}' }).add(2);
    meter.createHistogram('shop.checkout.duration', { unit: 's' }).record(0.2);
    const { resourceMetrics } = await exporter.collect();
    const problems = checkOpenMetrics(new PrometheusSerializer().serialize(resourceMetrics)).join('\n');
    expect(problems).toContain('invalid unit "{order}"');
    expect(problems).toContain('unit "s" is not a suffix of the family name shop_checkout_duration');
    expect(problems).toContain('does not end with "# EOF"');
    expect(problems).toContain('family shop_orders_total appears again');
  });
});

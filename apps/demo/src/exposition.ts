// The demo's /metrics body: OpenTelemetry metrics in the OpenMetrics 1.0.0 text format or the
// Prometheus text format 0.0.4, whichever the scraper asks for. @opentelemetry/exporter-prometheus
// writes only the second, under a Content-Type without its version and with `# UNIT` lines that are
// invalid OpenMetrics (`{event}`, a unit that is not the name's suffix); so the demo collects
// through a plain MetricReader and writes both formats here, with the same names in both. Names
// follow OpenTelemetry's Prometheus compatibility rules, which give Sluice's metrics the names
// docs/operating.md lists (the ones exporter-prometheus gives them too).
import { diag, type AttributeValue, type Attributes } from '@opentelemetry/api';
import { DataPointType, type MetricData, type ResourceMetrics } from '@opentelemetry/sdk-metrics';

export type ExpositionFormat = 'openmetrics' | 'text';

export const CONTENT_TYPES: Readonly<Record<ExpositionFormat, string>> = {
  openmetrics: 'application/openmetrics-text; version=1.0.0; charset=utf-8',
  text: 'text/plain; version=0.0.4; charset=utf-8',
};

/**
 * The format that answers an `Accept` header: OpenMetrics 1.0.0 when the client names it (Prometheus
 * does, first) at least as high as the text format; the text format otherwise, also without a header
 * or for a plain `*\/*` (curl, browsers), as Prometheus's own client libraries do. Never a 406: every
 * scraper reads the text format.
 */
export function negotiate(accept: string | undefined): ExpositionFormat {
  let openMetrics = 0;
  let text = 0;
  for (const range of (accept ?? '').split(',')) {
    const [type = '', ...parameters] = range.split(';').map((part) => part.trim());
    const parameter = (name: string) =>
      parameters.find((p) => p.toLowerCase().startsWith(`${name}=`))?.slice(name.length + 1);
    const q = Number(parameter('q') ?? 1);
    if (!(q > 0)) continue;
    const version = parameter('version');
    switch (type.toLowerCase()) {
      case 'application/openmetrics-text':
        if (version === undefined || version === '1.0.0') openMetrics = Math.max(openMetrics, q);
        break;
      case 'text/plain':
        if (version === undefined || version === '0.0.4') text = Math.max(text, q);
        break;
      case 'text/*':
      case '*/*':
        text = Math.max(text, q);
        break;
    }
  }
  return openMetrics > 0 && openMetrics >= text ? 'openmetrics' : 'text';
}

type PrometheusType = 'counter' | 'gauge' | 'histogram';

interface Family {
  /** The MetricFamily name: without `_total` for a counter, with the unit suffix. */
  name: string;
  type: PrometheusType;
  /** The unit's Prometheus word (`seconds`), empty for counts and annotations. */
  unit: string;
  help: string;
  /** Sample lines, rendered already: they are the same in both formats. */
  samples: string[];
}

/** Writes one collection in `format`; metrics of every scope that share a name form one family. */
export function serialize(resourceMetrics: ResourceMetrics, format: ExpositionFormat): string {
  const families = new Map<string, Family>();
  for (const { scope, metrics } of resourceMetrics.scopeMetrics) {
    const scopeLabels: Attributes = { otel_scope_name: scope.name };
    if (scope.version) scopeLabels['otel_scope_version'] = scope.version;
    for (const metric of metrics) {
      const shape = familyOf(metric);
      if (!shape) continue;
      let family = families.get(shape.name);
      if (!family) {
        // promtool wants help text: without a description, the OpenTelemetry name says where it comes from.
        const help = metric.descriptor.description || metric.descriptor.name;
        family = { ...shape, help, samples: [] };
        families.set(shape.name, family);
      } else if (family.type !== shape.type || family.unit !== shape.unit) {
        diag.warn(
          `metric ${metric.descriptor.name} clashes with another metric named ${shape.name}: dropped`,
        );
        continue;
      }
      family.samples.push(...samplesOf(metric, family, scopeLabels));
    }
  }

  const openMetrics = format === 'openmetrics';
  const lines: string[] = [];
  // The resource, as OpenTelemetry maps it: an info metric `target` (a gauge in the text format,
  // which has no info type), first, as OpenMetrics recommends.
  const target = `target_info${labelsOf(resourceMetrics.resource.attributes)} 1`;
  if (openMetrics) lines.push('# TYPE target info', '# HELP target Target metadata', target);
  else lines.push('# HELP target_info Target metadata', '# TYPE target_info gauge', target);
  for (const family of families.values()) {
    if (openMetrics) {
      lines.push(`# TYPE ${family.name} ${family.type}`);
      if (family.unit) lines.push(`# UNIT ${family.name} ${family.unit}`);
      lines.push(`# HELP ${family.name} ${escape(family.help, true)}`);
    } else {
      // The text format names a counter's family after its sample, `_total` included.
      const name = family.type === 'counter' ? `${family.name}_total` : family.name;
      lines.push(`# HELP ${name} ${escape(family.help, false)}`);
      lines.push(`# TYPE ${name} ${family.type}`);
    }
    lines.push(...family.samples);
  }
  if (openMetrics) lines.push('# EOF');
  return `${lines.join('\n')}\n`;
}

function familyOf(metric: MetricData): Omit<Family, 'help' | 'samples'> | undefined {
  let type: PrometheusType;
  switch (metric.dataPointType) {
    case DataPointType.SUM:
      type = metric.isMonotonic ? 'counter' : 'gauge';
      break;
    case DataPointType.GAUGE:
      type = 'gauge';
      break;
    case DataPointType.HISTOGRAM:
      type = 'histogram';
      break;
    default:
      diag.warn(`metric ${metric.descriptor.name}: exponential histograms are not exposed`);
      return undefined;
  }
  const unit = unitWord(metric.descriptor.unit, type);
  let name = metricName(metric.descriptor.name);
  // The unit suffix only where the name lacks it: `sluice.handler.duration_seconds` in `s` stays as it is.
  if (unit && !name.endsWith(`_${unit}`)) name = `${name}_${unit}`;
  if (type === 'counter' && name.endsWith('_total')) name = name.slice(0, -'_total'.length);
  return { name, type, unit };
}

function samplesOf(metric: MetricData, family: Family, scopeLabels: Attributes): string[] {
  const samples: string[] = [];
  switch (metric.dataPointType) {
    case DataPointType.SUM:
    case DataPointType.GAUGE:
      for (const point of metric.dataPoints) {
        const suffix = family.type === 'counter' ? '_total' : '';
        samples.push(
          `${family.name}${suffix}${labelsOf(point.attributes, scopeLabels)} ${number(point.value)}`,
        );
      }
      break;
    case DataPointType.HISTOGRAM:
      for (const point of metric.dataPoints) {
        const { buckets, sum, count } = point.value;
        let cumulative = 0;
        buckets.counts.forEach((n, i) => {
          cumulative += n;
          const le = canonical(buckets.boundaries[i] ?? Infinity);
          samples.push(
            `${family.name}_bucket${labelsOf(point.attributes, scopeLabels, { le })} ${cumulative}`,
          );
        });
        // A sum that may be negative is no counter: OpenMetrics then wants neither sum nor count.
        if (sum !== undefined && sum >= 0 && (buckets.boundaries[0] ?? 0) >= 0) {
          samples.push(`${family.name}_count${labelsOf(point.attributes, scopeLabels)} ${count}`);
          samples.push(`${family.name}_sum${labelsOf(point.attributes, scopeLabels)} ${number(sum)}`);
        }
      }
      break;
    default:
      break;
  }
  return samples;
}

/** Characters other than `[a-zA-Z0-9_]` become `_`, runs of `_` one, as exporter-prometheus does. */
function metricName(name: string): string {
  const sanitized = name.replace(/[^a-zA-Z0-9_]/g, '_').replace(/_{2,}/g, '_');
  return /^[0-9]/.test(sanitized) ? `_${sanitized}` : sanitized;
}

function labelName(key: string): string {
  const sanitized = key.replace(/[^a-zA-Z0-9_]/g, '_').replace(/_{2,}/g, '_');
  return /^[0-9]/.test(sanitized) ? `key_${sanitized}` : sanitized;
}

const UNIT_WORDS: Readonly<Record<string, string>> = {
  d: 'days',
  h: 'hours',
  min: 'minutes',
  s: 'seconds',
  ms: 'milliseconds',
  us: 'microseconds',
  ns: 'nanoseconds',
  By: 'bytes',
  KiBy: 'kibibytes',
  MiBy: 'mebibytes',
  GiBy: 'gibibytes',
  KBy: 'kilobytes',
  MBy: 'megabytes',
  GBy: 'gigabytes',
  m: 'meters',
  V: 'volts',
  A: 'amperes',
  J: 'joules',
  W: 'watts',
  g: 'grams',
  Cel: 'celsius',
  Hz: 'hertz',
  '%': 'percent',
};
const PER_UNIT_WORDS: Readonly<Record<string, string>> = {
  s: 'second',
  m: 'minute',
  h: 'hour',
  d: 'day',
  w: 'week',
  mo: 'month',
  y: 'year',
};

/**
 * A UCUM unit as a Prometheus name suffix: `s` → `seconds`, `By/s` → `bytes_per_second`; `{event}`
 * annotations say what is counted and add nothing; `1` is `ratio` on a gauge and nothing elsewhere
 * (a count of things in `1` must not read as a ratio).
 */
function unitWord(unit: string, type: PrometheusType): string {
  const plain = unit.replace(/\{[^}]*\}/g, '').trim();
  if (plain === '1') return type === 'gauge' ? 'ratio' : '';
  const [main = '', per] = plain.split('/', 2);
  const words = [UNIT_WORDS[main] ?? main];
  if (per) words.push('per', PER_UNIT_WORDS[per] ?? per);
  return words
    .filter((w) => w !== '' && w !== '1')
    .join('_')
    .replace(/[^a-zA-Z0-9_]/g, '_')
    .replace(/_{2,}/g, '_')
    .replace(/^_|_$/g, '');
}

/** `{a="x",b="y"}` (nothing without labels); keys that sanitize alike share a label, values joined by `;`. */
function labelsOf(attributes: Attributes, ...more: Attributes[]): string {
  const labels = new Map<string, string[]>();
  for (const set of [attributes, ...more]) {
    for (const key of Object.keys(set).sort()) {
      const value = set[key];
      if (value === undefined) continue;
      const name = labelName(key);
      labels.set(name, [...(labels.get(name) ?? []), labelValue(value)]);
    }
  }
  if (labels.size === 0) return '';
  const rendered = [...labels].map(([name, values]) => `${name}="${escape(values.join(';'), true)}"`);
  return `{${rendered.join(',')}}`;
}

function labelValue(value: AttributeValue): string {
  return typeof value === 'string' ? value : Array.isArray(value) ? JSON.stringify(value) : String(value);
}

/** Backslash and newline escaped; double quotes too in label values and OpenMetrics HELP text. */
function escape(text: string, quotes: boolean): string {
  const escaped = text.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
  return quotes ? escaped.replace(/"/g, '\\"') : escaped;
}

function number(value: number): string {
  if (value === Infinity) return '+Inf';
  if (value === -Infinity) return '-Inf';
  return Number.isNaN(value) ? 'NaN' : String(value);
}

/**
 * A bucket boundary in OpenMetrics' canonical form (Go's shortest `%g`, `.0` added to integers):
 * `0.001`, `1.0`, `30.0`, `1e-05`, `1e+06`. Both formats use it, so a series keeps its `le` labels
 * whichever format a scrape got.
 */
export function canonical(value: number): string {
  if (!Number.isFinite(value)) return number(value);
  const [mantissa = '', exponentText = '0'] = value.toExponential().split('e');
  const exponent = Number(exponentText);
  if (exponent < -4 || exponent >= 6) {
    const sign = exponent < 0 ? '-' : '+';
    return `${mantissa}e${sign}${String(Math.abs(exponent)).padStart(2, '0')}`;
  }
  const fixed = String(value);
  return /[.e]/.test(fixed) ? fixed : `${fixed}.0`;
}

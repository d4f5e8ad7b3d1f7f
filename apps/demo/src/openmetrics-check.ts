// A strict reader of the OpenMetrics 1.0.0 text format, for tests: it returns every rule an
// exposition breaks (empty when it is valid), where a scraper would stop at the first or let some
// pass. The rules are the specification's: the ABNF (names, labels, escapes, numbers, `# EOF`), the
// metadata (one TYPE, UNIT and HELP per family, before its samples, the unit a suffix of the name),
// the sample names each type allows, no family or MetricPoint interleaved, counters that are
// non-negative numbers, and histograms whose buckets are sorted, canonical, cumulative, end at +Inf
// and agree with `_count`.

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const REAL_NUMBER = /^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$/;
const SPECIAL_NUMBER = /^(?:[+-]?(?:inf|infinity)|nan)$/i;

const SUFFIXES: Readonly<Record<string, readonly string[]>> = {
  counter: ['_total', '_created'],
  gauge: [''],
  histogram: ['_bucket', '_count', '_sum', '_created'],
  gaugehistogram: ['_bucket', '_gcount', '_gsum'],
  stateset: [''],
  info: ['_info'],
  summary: ['', '_count', '_sum', '_created'],
  unknown: [''],
};

interface Sample {
  line: number;
  name: string;
  suffix: string;
  labels: Map<string, string>;
  value: number;
  valueText: string;
}

interface FamilyState {
  name: string;
  /** Where the family starts. */
  line: number;
  type: string;
  typed: boolean;
  unit?: string;
  help?: string;
  samples: Sample[];
}

/** The rules `text` breaks as an OpenMetrics 1.0.0 text exposition, each with its line number. */
export function checkOpenMetrics(text: string): string[] {
  const problems: string[] = [];
  const fail = (line: number, message: string) => problems.push(`line ${line}: ${message}`);
  if (text.includes('\r')) problems.push('carriage returns are not allowed');
  const lines = text.split('\n');
  if (lines.at(-1) === '') lines.pop(); // the LF after `# EOF`
  if (lines.at(-1) !== '# EOF') problems.push('the exposition does not end with "# EOF"');

  const families: FamilyState[] = [];
  const seen = new Set<string>();
  let current: FamilyState | undefined;
  const startFamily = (name: string, type: string, line: number): FamilyState => {
    if (seen.has(name)) fail(line, `family ${name} appears again: families must not be interleaved`);
    if (!METRIC_NAME.test(name)) fail(line, `invalid metric name ${JSON.stringify(name)}`);
    if (name.startsWith('_')) fail(line, `family names beginning with _ are reserved: ${name}`);
    seen.add(name);
    const family: FamilyState = { name, line, type, typed: false, samples: [] };
    families.push(family);
    return family;
  };

  lines.forEach((raw, index) => {
    const line = index + 1;
    if (raw === '# EOF') {
      if (index !== lines.length - 1) fail(line, '"# EOF" before the end');
      return;
    }
    if (raw.startsWith('#')) {
      const match = /^# (TYPE|UNIT|HELP) (\S+) ?(.*)$/.exec(raw);
      if (!match) {
        fail(line, `only TYPE, UNIT, HELP and EOF lines may begin with #: ${raw}`);
        return;
      }
      const [, keyword, name = '', rest = ''] = match;
      if (!current || current.name !== name || current.samples.length > 0) {
        current = startFamily(name, 'unknown', line);
      }
      const family = current;
      if (keyword === 'TYPE') {
        if (!(rest in SUFFIXES)) fail(line, `unknown type ${JSON.stringify(rest)}`);
        if (family.typed) fail(line, `a second TYPE line for ${name}`);
        family.typed = true;
        family.type = rest in SUFFIXES ? rest : 'unknown';
      } else if (keyword === 'UNIT') {
        if (family.unit !== undefined) fail(line, `a second UNIT line for ${name}`);
        family.unit = rest;
        if (!/^[a-zA-Z0-9_:]*$/.test(rest)) fail(line, `invalid unit ${JSON.stringify(rest)}`);
        if (rest !== '' && !name.endsWith(`_${rest}`)) {
          fail(line, `unit ${JSON.stringify(rest)} is not a suffix of the family name ${name}`);
        }
      } else {
        if (family.help !== undefined) fail(line, `a second HELP line for ${name}`);
        family.help = rest;
        const problem = escapeProblem(rest);
        if (problem) fail(line, `HELP of ${name}: ${problem}`);
      }
      return;
    }
    const sample = parseSample(raw, line, fail);
    if (!sample) return;
    const owner = current && suffixIn(current, sample.name);
    if (owner === undefined) {
      current = startFamily(sample.name, 'unknown', line);
      sample.suffix = '';
    } else {
      sample.suffix = owner;
    }
    (current as FamilyState).samples.push(sample);
  });

  for (const family of families) checkFamily(family, fail);
  return problems;
}

/** The suffix by which `name` belongs to `family`, or undefined when it starts another family. */
function suffixIn(family: FamilyState, name: string): string | undefined {
  return SUFFIXES[family.type]?.find((suffix) => family.name + suffix === name);
}

function parseSample(
  raw: string,
  line: number,
  fail: (line: number, message: string) => void,
): Sample | undefined {
  const name = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(raw)?.[0];
  if (!name) {
    fail(line, `not a sample: ${raw}`);
    return undefined;
  }
  let rest = raw.slice(name.length);
  const labels = new Map<string, string>();
  if (rest.startsWith('{')) {
    rest = rest.slice(1);
    while (!rest.startsWith('}')) {
      const label = /^([^=]*)="((?:[^"\\\n]|\\.)*)"/.exec(rest);
      if (!label) {
        fail(line, `malformed labels: ${raw}`);
        return undefined;
      }
      const [whole, labelName = '', value = ''] = label;
      if (!LABEL_NAME.test(labelName)) fail(line, `invalid label name ${JSON.stringify(labelName)}`);
      if (labelName.startsWith('__')) fail(line, `label names beginning with __ are reserved: ${labelName}`);
      if (labels.has(labelName)) fail(line, `label ${labelName} twice`);
      const problem = escapeProblem(value);
      if (problem) fail(line, `label ${labelName}: ${problem}`);
      labels.set(labelName, value);
      rest = rest.slice(whole.length);
      if (rest.startsWith(',}')) fail(line, `a comma before } in labels: ${raw}`);
      if (rest.startsWith(',')) rest = rest.slice(1);
      else if (!rest.startsWith('}')) {
        fail(line, `expected , or } in labels: ${raw}`);
        return undefined;
      }
    }
    rest = rest.slice(1);
  }
  // An exemplar (` # {…} value`) follows the value or timestamp; it is not checked here.
  const parts = (rest.split(' # ')[0] ?? '').split(' ');
  if (parts[0] !== '' || parts.length < 2) {
    fail(line, `expected a space and a value: ${raw}`);
    return undefined;
  }
  const [, valueText = '', timestamp, ...extra] = parts;
  if (!REAL_NUMBER.test(valueText) && !SPECIAL_NUMBER.test(valueText)) {
    fail(line, `invalid number ${JSON.stringify(valueText)}`);
  }
  if (timestamp !== undefined && !REAL_NUMBER.test(timestamp)) {
    fail(line, `invalid timestamp ${JSON.stringify(timestamp)}`);
  }
  if (extra.length > 0) fail(line, `unexpected text after the timestamp: ${raw}`);
  return { line, name, suffix: '', labels, value: toNumber(valueText), valueText };
}

function toNumber(text: string): number {
  if (/^[+]?inf(inity)?$/i.test(text)) return Infinity;
  if (/^-inf(inity)?$/i.test(text)) return -Infinity;
  return /^nan$/i.test(text) ? NaN : Number(text);
}

/** Why an escaped string is malformed (a raw double quote, a lone backslash), or undefined. */
function escapeProblem(text: string): string | undefined {
  if (/(^|[^\\])(\\\\)*"/.test(text)) return 'an unescaped double quote';
  if (/(^|[^\\])(\\\\)*\\$/.test(text)) return 'a trailing backslash';
  if (/\\[^n"\\]/.test(text.replace(/\\\\/g, ''))) return 'an undefined escape sequence';
  return undefined;
}

const key = (labels: Map<string, string>, without?: string) =>
  JSON.stringify([...labels].filter(([name]) => name !== without).sort(([a], [b]) => a.localeCompare(b)));

function checkFamily(family: FamilyState, fail: (line: number, message: string) => void): void {
  const { type, name } = family;
  if ((type === 'info' || type === 'stateset') && family.unit)
    fail(family.line, `${type} ${name} must not have a unit`);
  // MetricPoints: the samples of one label set (le aside) are contiguous.
  const points = new Map<string, Sample[]>();
  let previous: string | undefined;
  const seenSamples = new Set<string>();
  for (const sample of family.samples) {
    const point = key(sample.labels, type === 'histogram' || type === 'gaugehistogram' ? 'le' : undefined);
    if (point !== previous && points.has(point)) {
      fail(sample.line, `MetricPoint ${point} of ${name} is interleaved with another`);
    }
    previous = point;
    points.set(point, [...(points.get(point) ?? []), sample]);
    const identity = `${sample.name}${key(sample.labels)}`;
    if (seenSamples.has(identity)) fail(sample.line, `sample ${identity} appears twice`);
    seenSamples.add(identity);
    if (type === 'counter' && sample.suffix === '_total' && !(sample.value >= 0)) {
      fail(sample.line, `counter ${name} must be a non-negative number, not ${sample.valueText}`);
    }
    if (type === 'info' && sample.value !== 1) fail(sample.line, `info ${name} must be 1`);
  }
  if (type !== 'histogram' && type !== 'gaugehistogram') return;
  const count = type === 'histogram' ? '_count' : '_gcount';
  const sum = type === 'histogram' ? '_sum' : '_gsum';
  for (const samples of points.values()) {
    const first = samples[0] as Sample;
    const buckets = samples.filter((s) => s.suffix === '_bucket');
    for (const s of samples) {
      if (s.suffix !== '_bucket' && s.labels.has('le')) fail(s.line, `${s.name} must not have an le label`);
    }
    if (buckets.length === 0) {
      fail(first.line, `histogram ${name} has a MetricPoint without buckets`);
      continue;
    }
    let lastBound = -Infinity;
    let lastValue = 0;
    for (const bucket of buckets) {
      const le = bucket.labels.get('le');
      if (le === undefined) {
        fail(bucket.line, `bucket of ${name} without le`);
        continue;
      }
      const bound = toNumber(le);
      if (!REAL_NUMBER.test(le) && le !== '+Inf') fail(bucket.line, `le="${le}" is not a number`);
      // Canonical: a float always shows as one (`1.0`, not `1`), so a series has one spelling.
      if (le !== '+Inf' && !/[.e]/.test(le)) fail(bucket.line, `le="${le}" is not canonical (write ${le}.0)`);
      if (!(bound > lastBound)) fail(bucket.line, `buckets of ${name} are not sorted by increasing le`);
      if (!Number.isInteger(bucket.value) || bucket.value < lastValue) {
        fail(bucket.line, `buckets of ${name} must be cumulative integers`);
      }
      lastBound = bound;
      lastValue = bucket.value;
    }
    const last = buckets.at(-1) as Sample;
    if (last.labels.get('le') !== '+Inf') fail(last.line, `histogram ${name} has no +Inf bucket last`);
    const countSample = samples.find((s) => s.suffix === count);
    const sumSample = samples.find((s) => s.suffix === sum);
    if ((countSample === undefined) !== (sumSample === undefined)) {
      fail(first.line, `histogram ${name}: ${count} and ${sum} come together or not at all`);
    }
    if (countSample && countSample.value !== last.value) {
      fail(
        countSample.line,
        `${name}${count} ${countSample.valueText} differs from its +Inf bucket ${last.valueText}`,
      );
    }
    if (type === 'histogram' && sumSample && !(sumSample.value >= 0)) {
      fail(sumSample.line, `${name}_sum must be a non-negative number`);
    }
  }
}

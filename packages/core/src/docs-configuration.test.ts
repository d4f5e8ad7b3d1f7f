// Keeps docs/configuration.md in sync with the option types it documents: every property of each
// interface has a row under the `## <Interface>` heading, no row names a property that does not
// exist, the dispatcher's documented defaults are DEFAULTS' values, and every environment variable
// the demo and the test harness read is documented.
import { readdir, readFile } from 'node:fs/promises';
import { describe, expect, test } from 'vitest';
import { DEFAULTS } from './options.js';

const DOC = 'docs/configuration.md';

/** Where each documented interface is declared (paths from the repository root). */
const INTERFACES: readonly { readonly name: string; readonly file: string }[] = [
  { name: 'DispatcherOptions', file: 'packages/core/src/options.ts' },
  { name: 'Consumer', file: 'packages/core/src/consumers/consumer.ts' },
  { name: 'ErrorPolicy', file: 'packages/core/src/consumers/consumer.ts' },
  { name: 'AppendOptions', file: 'packages/core/src/append.ts' },
  { name: 'MigrateOptions', file: 'packages/core/src/schema/migrate.ts' },
  { name: 'PruneOptions', file: 'packages/core/src/retention/prune.ts' },
  { name: 'AdminOptions', file: 'packages/admin/src/create-admin.ts' },
  { name: 'SluicePluginOptions', file: 'packages/fastify/src/options.ts' },
  { name: 'OpsOptions', file: 'packages/fastify/src/options.ts' },
];

/** The environment variables read under these folders are documented in these sections. */
const ENVIRONMENTS: readonly { readonly heading: string; readonly dirs: readonly string[] }[] = [
  { heading: 'Demo environment variables', dirs: ['apps/demo/src'] },
  { heading: 'Test environment variables', dirs: ['packages/testing/src', 'e2e/src'] },
];

const repoUrl = (path: string) => new URL(`../../../${path}`, import.meta.url);
const readRepoFile = (path: string) => readFile(repoUrl(path), 'utf8');

// ---------------------------------------------------------------------------------------------
// TypeScript: the property names an interface body declares.

/**
 * Blanks comments, and turns every character of a string or template literal that is not part of
 * a plain name into `_` (quotes and newlines are kept), so braces, colons and quotes inside them
 * cannot confuse the scan that follows, while a quoted property name survives.
 */
function maskCommentsAndStrings(source: string): string {
  let out = '';
  let i = 0;
  while (i < source.length) {
    const c = source[i]!;
    const next = source[i + 1];
    if (c === '/' && next === '/') {
      while (i < source.length && source[i] !== '\n') i++;
    } else if (c === '/' && next === '*') {
      const end = source.indexOf('*/', i + 2);
      const stop = end === -1 ? source.length : end + 2;
      out += source.slice(i, stop).replace(/[^\n]/g, ' ');
      i = stop;
    } else if (c === "'" || c === '"' || c === '`') {
      out += c;
      i++;
      while (i < source.length && source[i] !== c) {
        if (source[i] === '\\') {
          out += '__';
          i += 2;
          continue;
        }
        const inner = source[i]!;
        out += inner === '\n' || /[\w$-]/.test(inner) ? inner : '_';
        i++;
      }
      out += c;
      i++;
    } else {
      out += c;
      i++;
    }
  }
  return out;
}

const OPENERS = '{([';
const CLOSERS = '})]';

/**
 * The names of the properties and methods declared directly in `export interface <name>`'s body:
 * members of nested object types, parameter lists and index signatures are not the interface's
 * own. Inherited members (`extends`) are not included. Undefined when there is no such interface.
 */
function interfaceMembers(source: string, name: string): string[] | undefined {
  // Declarations start a line; scanning from there keeps the code above (regex literals) out of it.
  const header = new RegExp(String.raw`^export\s+interface\s+${name}\b`, 'm').exec(source);
  if (!header) return undefined;
  const masked = maskCommentsAndStrings(source.slice(header.index + header[0].length));
  // The body opens at the first `{` outside the type parameters and the extends clause's type arguments.
  let angles = 0;
  let open = -1;
  for (let i = 0; i < masked.length && open === -1; i++) {
    const c = masked[i]!;
    if (c === '<') angles++;
    else if (c === '>' && masked[i - 1] !== '=') angles--;
    else if (c === '{' && angles === 0) open = i;
  }
  if (open === -1) return undefined;
  // Keep only the body's top level: nested brackets and what they contain are dropped.
  let topLevel = '';
  let depth = 0;
  for (let i = open + 1; i < masked.length; i++) {
    const c = masked[i]!;
    if (OPENERS.includes(c)) depth++;
    else if (CLOSERS.includes(c)) {
      if (depth === 0) break; // the interface's closing brace
      depth--;
    } else if (depth === 0) topLevel += c;
  }
  // A member starts the body or follows a separator, and its name is followed by `?:`, `:`, `(` or `<`.
  const member =
    /(?:^|[;,\n])\s*(?:readonly\s+)?(?:(['"])([^'"\n]+)\1|([A-Za-z_$][\w$]*))\s*\??\s*(?=[:(<])/g;
  return [...topLevel.matchAll(member)].map((m) => (m[2] ?? m[3])!);
}

// ---------------------------------------------------------------------------------------------
// Markdown: the rows of the tables under each `## ` heading.

interface DocRow {
  /** The first cell's backticked name. */
  readonly option: string;
  /** Cells by lower-cased header text. */
  readonly cells: ReadonlyMap<string, string>;
}

const splitCells = (line: string) =>
  line
    .trim()
    .replace(/^\|/, '')
    .replace(/(?<!\\)\|$/, '')
    .split(/(?<!\\)\|/)
    .map((cell) => cell.trim());

const isSeparator = (line: string) => /^\|(\s*:?-+:?\s*\|)+\s*$/.test(line.trim());

/** Every `## ` section's table rows; a row whose first cell is not one backticked name is kept with option ''. */
function documentedSections(markdown: string): Map<string, DocRow[]> {
  const sections = new Map<string, DocRow[]>();
  let rows: DocRow[] | undefined;
  let header: string[] | undefined;
  const lines = markdown.split('\n');
  for (const [index, line] of lines.entries()) {
    const heading = /^## (.+?)\s*$/.exec(line);
    if (heading) {
      rows = [];
      header = undefined;
      sections.set(heading[1]!, rows);
      continue;
    }
    if (!line.trim().startsWith('|')) {
      if (line.trim() === '') header = undefined;
      continue;
    }
    if (!rows || isSeparator(line)) continue;
    if (isSeparator(lines[index + 1] ?? '')) {
      header = splitCells(line).map((cell) => cell.toLowerCase());
      continue;
    }
    const cells = splitCells(line);
    const named = /^`([^`]+)`$/.exec(cells[0] ?? '');
    const names = header;
    rows.push({
      option: named ? named[1]! : '',
      cells: new Map(cells.map((cell, i) => [names?.[i] ?? String(i), cell])),
    });
  }
  return sections;
}

/**
 * A documented default as a value: `100`, `` `300_000` (5 min) ``, `300000`, `true`, `'sluice'`.
 * Undefined when the cell does not start with a literal (e.g. "every feature enabled").
 */
function parseDefault(cell: string): number | boolean | string | undefined {
  const text = cell.replace(/`/g, '').trim();
  const literal = /^(true|false|-?\d[\d_]*(?:\.\d+)?|'[^']*')(?![\w.])/.exec(text);
  if (!literal) return undefined;
  const value = literal[1]!;
  if (value === 'true' || value === 'false') return value === 'true';
  if (value.startsWith("'")) return value.slice(1, -1);
  return Number(value.replace(/_/g, ''));
}

// ---------------------------------------------------------------------------------------------

describe('the helpers of this test', () => {
  test('interfaceMembers() reads only the top-level members of the named interface', () => {
    const source = `
/** Not this one: { fake: 1 } */
export interface Other { nope: string }
const pattern = /'{/;
export interface Sample<T extends object = object> extends Base<{ a: 1 }> {
        /** A comment with { braces } and a: colon. */
        readonly plain: string;
        optional?: number; // trailing: comment
        'quoted-name'?: boolean,
        nested?: { inner: string; deeper: { deepest: number } };
        fn: (arg: { x: number }, other: string) => void;
        method(arg: string): Promise<void>;
        generic<U>(value: U): U;
        union:
          | 'a: b'
          | "{"
          | \`x\${'}'}\`;
        [key: string]: unknown;
        list: readonly { item: string }[];
        last: Record<string, { k: number }>
      }
export interface After { later: string }`;
    expect(interfaceMembers(source, 'Sample')).toEqual([
      'plain',
      'optional',
      'quoted-name',
      'nested',
      'fn',
      'method',
      'generic',
      'union',
      'list',
      'last',
    ]);
    expect(interfaceMembers(source, 'Other')).toEqual(['nope']);
    expect(interfaceMembers(source, 'Missing')).toBeUndefined();
  });

  test('documentedSections() reads table rows by header, escaped pipes included', () => {
    const markdown = [
      '# Title',
      '## First',
      'Text with `code`.',
      '',
      '| option | type | default | meaning |',
      '| --- | --- | --- | --- |',
      "| `a` | `'x' \\| 'y'` | `'x'` | one |",
      '| `b` | `number` | `300_000` (5 min) | two |',
      '## Second',
      '| variable | default |',
      '| :-- | --: |',
      '| `C` | unset |',
    ].join('\n');
    const sections = documentedSections(markdown);
    expect([...sections.keys()]).toEqual(['First', 'Second']);
    const first = sections.get('First')!;
    expect(first.map((r) => r.option)).toEqual(['a', 'b']);
    expect(first[0]!.cells.get('type')).toBe("`'x' \\| 'y'`");
    expect(first[1]!.cells.get('default')).toBe('`300_000` (5 min)');
    expect(sections.get('Second')!.map((r) => [r.option, r.cells.get('default')])).toEqual([['C', 'unset']]);
  });

  test('parseDefault() accepts the documented formats', () => {
    expect(parseDefault('100')).toBe(100);
    expect(parseDefault('`100`')).toBe(100);
    expect(parseDefault('300_000 (5 min)')).toBe(300_000);
    expect(parseDefault('`300_000` (5 min)')).toBe(300_000);
    expect(parseDefault('300000')).toBe(300_000);
    expect(parseDefault('true')).toBe(true);
    expect(parseDefault('`false`')).toBe(false);
    expect(parseDefault("`'sluice'`")).toBe('sluice');
    expect(parseDefault('every feature enabled')).toBeUndefined();
    expect(parseDefault('1.5x')).toBeUndefined();
  });
});

describe(`${DOC} documents every option`, () => {
  const doc = readRepoFile(DOC).then(documentedSections);

  test.each(INTERFACES)('$name ($file)', async ({ name, file }) => {
    const members = interfaceMembers(await readRepoFile(file), name);
    expect(
      members,
      `no \`export interface ${name}\` in ${file}: update INTERFACES in this test`,
    ).toBeDefined();
    expect(members!.length, `no members parsed from ${name} in ${file}`).toBeGreaterThan(0);
    const rows = (await doc).get(name);
    expect(
      rows,
      `${DOC} has no "## ${name}" section: add one with a row per option of ${file}`,
    ).toBeDefined();

    const documented = rows!.map((r) => r.option);
    const problems = [
      ...members!
        .filter((option) => !documented.includes(option))
        .map(
          (option) =>
            `${name}.${option} (${file}) is not documented: add a \`${option}\` row under "## ${name}" in ${DOC}`,
        ),
      ...documented
        .filter((option) => !members!.includes(option))
        .map((option) =>
          option === ''
            ? `${DOC} has a row under "## ${name}" whose first cell is not one backticked option name: fix it in ${DOC}`
            : `${DOC} documents \`${option}\` under "## ${name}", but ${name} in ${file} has no such option: remove the row from ${DOC} (or fix its name)`,
        ),
      ...documented
        .filter((option, i) => option !== '' && documented.indexOf(option) !== i)
        .map((option) => `${DOC} documents \`${option}\` twice under "## ${name}": remove one row`),
    ];
    expect(problems).toEqual([]);
  });

  test('DispatcherOptions: every DEFAULTS entry is documented with its value', async () => {
    const rows = (await doc).get('DispatcherOptions') ?? [];
    const problems = Object.entries(DEFAULTS).flatMap(([option, value]) => {
      const row = rows.find((r) => r.option === option);
      if (!row) {
        return [
          `DEFAULTS.${option} (packages/core/src/options.ts) is not documented: add a \`${option}\` row under "## DispatcherOptions" in ${DOC}`,
        ];
      }
      const cell = row.cells.get('default') ?? '';
      const documented = parseDefault(cell);
      if (documented === value) return [];
      return [
        `${DOC} gives DispatcherOptions.${option} the default "${cell}", but DEFAULTS in packages/core/src/options.ts applies ${String(value)}: fix the default column in ${DOC}`,
      ];
    });
    expect(problems).toEqual([]);
  });

  test('every DEFAULTS key is a DispatcherOptions property (the parser sees the real file)', async () => {
    const members = interfaceMembers(await readRepoFile('packages/core/src/options.ts'), 'DispatcherOptions');
    expect(members).toEqual(expect.arrayContaining(Object.keys(DEFAULTS)));
    expect(members).toEqual(expect.arrayContaining(['sql', 'consumers', 'schema', 'logger']));
  });

  test.each(ENVIRONMENTS)('$heading ($dirs)', async ({ heading, dirs }) => {
    const read = new Map<string, string>();
    for (const dir of dirs) {
      const files = (await readdir(repoUrl(dir), { recursive: true })).filter(
        (f) => f.endsWith('.ts') && !f.split(/[\\/]/).includes('node_modules'),
      );
      for (const file of files) {
        const source = await readRepoFile(`${dir}/${file}`);
        for (const m of source.matchAll(/process\.env(?:\[\s*['"]([A-Z0-9_]+)['"]\s*\]|\.([A-Z0-9_]+))/g)) {
          const variable = (m[1] ?? m[2])!;
          if (!read.has(variable)) read.set(variable, `${dir}/${file}`);
        }
      }
    }
    const rows = (await doc).get(heading);
    expect(rows, `${DOC} has no "## ${heading}" section`).toBeDefined();
    const documented = rows!.map((r) => r.option);
    const problems = [
      ...[...read]
        .filter(([variable]) => !documented.includes(variable))
        .map(
          ([variable, file]) =>
            `${variable} (read in ${file}) is not documented: add a \`${variable}\` row under "## ${heading}" in ${DOC}`,
        ),
      ...documented
        .filter((variable) => !read.has(variable))
        .map(
          (variable) =>
            `${DOC} documents \`${variable}\` under "## ${heading}", but nothing in ${dirs.join(', ')} reads it: remove the row from ${DOC}`,
        ),
    ];
    expect(problems).toEqual([]);
  });
});

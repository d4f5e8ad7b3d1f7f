// No reference in the repository points outside it. Every text file the repository tracks is
// scanned for references to documents, and each must name a document of the repository, and a
// section of it that exists:
//   - `docs/design.md §5.3` (a numbered heading; `, §6` and `and §6` continue the list);
//   - `docs/reliability.md#c8`, `[text](operating.md#cli)`, `](#metrics)`: a GitHub anchor of a
//     heading, or an explicit `<a id="…">`;
//   - `docs/operating.md, "Behind a pooler"` or `docs/guarantees.md ("…")`: a heading, or a bold
//     lead-in, with that text;
//   - any `<path>.md`, and links to this repository on GitHub: the file exists;
//   - `[design §5.3](design.md#…)`: a `§` in a Markdown link's text names a section of the linked
//     document;
//   - a `§` with no document before it on its line: in a Markdown file, a section of that file;
//     anywhere else it is reported (cite the document), except after `RFC <n>`.
// The design documents users do not have ("DESIGN", "RELIABILITY", "CONVENTIONS C<n>", the
// `shared/` folder they lived in) count as references outside the repository.
//
// This file names those forms itself, so it is not scanned.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, test } from 'vitest';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const SELF = 'packages/core/src/docs-references.test.ts';

// ---------------------------------------------------------------------------------------------
// Markdown: what a document offers to be referenced.

interface DocTargets {
  /** Leading numbers or ids of headings: `5`, `5.3`, `G1`. */
  readonly sections: ReadonlySet<string>;
  /** GitHub anchors of headings, and explicit `<a id>` / `<a name>` anchors. */
  readonly anchors: ReadonlySet<string>;
  /** Heading texts and bold lead-ins, lower case, without trailing punctuation. */
  readonly titles: ReadonlySet<string>;
}

/** A heading's text as GitHub renders it: links, images, code and emphasis marks removed. */
function plainText(markdown: string): string {
  return markdown
    .replace(/<[^>]+>/g, '')
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/`/g, '')
    .replace(/(^|[^\w])_([^_]+)_(?=[^\w]|$)/g, '$1$2')
    .replace(/\*/g, '')
    .trim();
}

/** GitHub's heading anchor: lower case, punctuation but `-` and `_` removed, spaces to `-`. */
export function githubAnchor(text: string): string {
  return text
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-');
}

const normalTitle = (text: string) =>
  text
    .toLowerCase()
    .replace(/[.:,;]+$/, '')
    .trim();

export function docTargets(markdown: string): DocTargets {
  const sections = new Set<string>();
  const anchors = new Set<string>();
  const titles = new Set<string>();
  const used = new Map<string, number>();
  let fence: string | undefined;
  for (const line of markdown.split('\n')) {
    const fenceMark = /^\s*(```|~~~)/.exec(line)?.[1];
    if (fenceMark) {
      if (fence === undefined) fence = fenceMark;
      else if (fence === fenceMark) fence = undefined;
      continue;
    }
    if (fence !== undefined) continue;
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)?.[1];
    if (heading === undefined) continue;
    const text = plainText(heading);
    const slug = githubAnchor(text);
    const seen = used.get(slug) ?? 0;
    used.set(slug, seen + 1);
    anchors.add(seen === 0 ? slug : `${slug}-${seen}`);
    titles.add(normalTitle(text));
    const key = /^([A-Za-z]?\d+(?:\.\d+)*)\.?(?:\s|$)/.exec(text)?.[1];
    if (key) sections.add(key);
  }
  for (const m of markdown.matchAll(/<a\s[^>]*?\b(?:id|name)="([^"]+)"/g)) anchors.add(m[1] as string);
  for (const m of markdown.matchAll(/\*\*([^*\n]+)\*\*/g)) titles.add(normalTitle(plainText(m[1] as string)));
  return { sections, anchors, titles };
}

// ---------------------------------------------------------------------------------------------
// References.

export interface Problem {
  readonly file: string;
  readonly line: number;
  /** `outside`: a document users do not have, or a `§` without a document */
  readonly kind: 'outside' | 'dead';
  readonly message: string;
}

/** The repository as the check sees it: text by path (relative, `/`-separated), and its folders. */
export interface Repository {
  readonly files: ReadonlyMap<string, string>;
}

const OUTSIDE =
  /\b(?:DESIGN|RELIABILITY)\b(?:\.md)?|\bCONVENTIONS\b(?!\.md)|\bCONVENTIONS\.md,?\s+C\d+\b|\bshared\/(?:DESIGN|RELIABILITY|CONVENTIONS)/g;
const DOC_PATH = /(?<![\w/.:@-])((?:\.{1,2}\/)*(?:[\w.-]+\/)*[\w.-]*[\w-]\.md)(?![\w/-])/g;
const SECTION_KEY = /^\s*§\s?([A-Za-z]?\d+(?:\.\d+)*)/;
const MORE_SECTIONS = /^\s*(?:,|;|\band\b|\bor\b)\s*§\s?([A-Za-z]?\d+(?:\.\d+)*)/;
const QUOTED_TITLE = /^(?:,\s*|\s*\(\s*)["'“]([^"'”\n]+)["'”]/;
const ANCHOR = /^#([\w-]+)/;
const REPO_URL =
  /https:\/\/github\.com\/sluice-dev\/sluice\/(?:blob|tree)\/main\/([^\s)#"'>`]*)(?:#([\w-]+))?/g;
const PAGE_ANCHOR = /\]\(#([\w-]+)\)/g;
const LINK = /\[([^\]]*)\]\(([^)\s#]*)(?:#[\w-]+)?\)/g;

function folders(files: Iterable<string>): Set<string> {
  const out = new Set<string>();
  for (const file of files) {
    let dir = posix.dirname(file);
    while (dir !== '.' && !out.has(dir)) {
      out.add(dir);
      dir = posix.dirname(dir);
    }
  }
  return out;
}

/** The repository file a path written in `from` means: beside it, from the root, or up its folders. */
function resolveDoc(repo: Repository, from: string, written: string): string | undefined {
  const candidates = [posix.join(posix.dirname(from), written), posix.normalize(written)];
  for (let dir = posix.dirname(from); dir !== '.'; dir = posix.dirname(dir)) {
    candidates.push(posix.join(dir, written));
  }
  candidates.push(posix.join('docs', written));
  return candidates.find((path) => repo.files.has(path));
}

/** Every reference in `repo` that names something the repository does not have. */
export function findProblems(repo: Repository): Problem[] {
  const problems: Problem[] = [];
  const targets = new Map<string, DocTargets>();
  const dirs = folders(repo.files.keys());
  const targetsOf = (path: string) => {
    let found = targets.get(path);
    if (!found) {
      found = docTargets(repo.files.get(path) ?? '');
      targets.set(path, found);
    }
    return found;
  };

  for (const [file, text] of repo.files) {
    const isMarkdown = file.endsWith('.md');
    text.split('\n').forEach((lineText, index) => {
      const line = index + 1;
      const report = (kind: Problem['kind'], message: string) => {
        problems.push({ file, line, kind, message });
      };
      /** Positions of `§` that belong to a document named before them. */
      const attributed = new Set<number>();

      for (const m of lineText.matchAll(OUTSIDE)) {
        report(
          'outside',
          `cites "${m[0]}", a document that is not in the repository: cite docs/design.md, docs/reliability.md or CONVENTIONS.md`,
        );
      }

      for (const m of lineText.matchAll(DOC_PATH)) {
        const written = m[1] as string;
        if (/^(?:DESIGN|RELIABILITY)\.md$/.test(posix.basename(written))) continue; // reported above
        const doc = resolveDoc(repo, file, written);
        if (!doc) {
          report('dead', `names ${written}, which is not a file of the repository`);
          continue;
        }
        let rest = lineText.slice(m.index + written.length);
        let offset = m.index + written.length;
        const anchor = ANCHOR.exec(rest)?.[1];
        if (anchor !== undefined) {
          if (!targetsOf(doc).anchors.has(anchor)) {
            report('dead', `links to ${written}#${anchor}, but ${doc} has no heading or anchor "${anchor}"`);
          }
          continue;
        }
        let section = SECTION_KEY.exec(rest);
        while (section) {
          const key = section[1] as string;
          attributed.add(offset + section[0].indexOf('§'));
          if (!targetsOf(doc).sections.has(key)) {
            report('dead', `cites ${written} §${key}, but ${doc} has no heading numbered ${key}`);
          }
          offset += section[0].length;
          rest = rest.slice(section[0].length);
          section = MORE_SECTIONS.exec(rest);
        }
        const title = QUOTED_TITLE.exec(lineText.slice(offset))?.[1];
        if (title !== undefined && !targetsOf(doc).titles.has(normalTitle(title))) {
          report(
            'dead',
            `cites ${written}, "${title}", but ${doc} has no heading or bold lead-in with that text`,
          );
        }
      }

      for (const m of lineText.matchAll(REPO_URL)) {
        const path = (m[1] as string).replace(/\/$/, '');
        if (!repo.files.has(path) && !dirs.has(path)) {
          report('dead', `links to ${m[0]}, but the repository has no ${path}`);
        } else if (m[2] !== undefined && path.endsWith('.md') && !targetsOf(path).anchors.has(m[2])) {
          report('dead', `links to ${m[0]}, but ${path} has no heading or anchor "${m[2]}"`);
        }
      }

      if (isMarkdown) {
        for (const m of lineText.matchAll(LINK)) {
          const target = m[2] === '' ? file : resolveDoc(repo, file, m[2] as string);
          if (target === undefined || !target.endsWith('.md')) continue;
          const label = m[1] as string;
          for (const s of label.matchAll(/§/g)) {
            const at = m.index + 1 + s.index;
            attributed.add(at);
            const key = SECTION_KEY.exec(label.slice(s.index))?.[1];
            if (key !== undefined && !targetsOf(target).sections.has(key)) {
              report(
                'dead',
                `cites §${key} of ${target} (a link's text), but it has no heading numbered ${key}`,
              );
            }
          }
        }
        for (const m of lineText.matchAll(PAGE_ANCHOR)) {
          if (!targetsOf(file).anchors.has(m[1] as string)) {
            report('dead', `links to #${m[1]}, but this file has no heading or anchor "${m[1]}"`);
          }
        }
      }

      for (const m of lineText.matchAll(/§/g)) {
        const at = m.index;
        if (attributed.has(at)) continue;
        const before = lineText.slice(0, at);
        if (/RFC\s*\d+\s*$/.test(before)) continue;
        if (isMarkdown) {
          const key = SECTION_KEY.exec(lineText.slice(at))?.[1];
          if (key !== undefined && !targetsOf(file).sections.has(key)) {
            report('dead', `cites §${key}, but this file has no heading numbered ${key}`);
          }
          continue;
        }
        // Part of a citation of an outside document, reported above.
        if (/\b(?:DESIGN|RELIABILITY|CONVENTIONS)\b/.test(before)) continue;
        report('outside', 'cites a section (§) without naming its document: write docs/design.md §N');
      }
    });
  }
  return problems;
}

// ---------------------------------------------------------------------------------------------
// The repository on disk.

const BINARY = /\.(?:png|jpe?g|gif|ico|woff2?|gz|tgz|zip|pdf)$/i;
const SKIPPED = new Set(['pnpm-lock.yaml', SELF]);
/** Folders never read when git cannot list the files (what .gitignore keeps out of it). */
const IGNORED_DIRS = new Set([
  'node_modules',
  'dist',
  '.git',
  '.turbo',
  'coverage',
  '.data',
  'results',
  'artifacts',
]);

function trackedFiles(): string[] {
  try {
    const out = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], {
      cwd: ROOT,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    return out.split('\0').filter((path) => path !== '' && existsSync(posix.join(ROOT, path)));
  } catch {
    // Not a git checkout: walk the tree, leaving out what is never committed.
    const out: string[] = [];
    const walk = (dir: string) => {
      for (const entry of readdirSync(posix.join(ROOT, dir), { withFileTypes: true })) {
        const path = dir === '' ? entry.name : `${dir}/${entry.name}`;
        if (entry.isDirectory()) {
          if (!IGNORED_DIRS.has(entry.name) || path === 'bench/results') walk(path);
        } else if (entry.isFile()) out.push(path);
      }
    };
    walk('');
    return out;
  }
}

function readRepository(): Repository {
  const files = new Map<string, string>();
  for (const path of trackedFiles()) {
    if (SKIPPED.has(path) || BINARY.test(path) || !statSync(posix.join(ROOT, path)).isFile()) continue;
    const text = readFileSync(posix.join(ROOT, path), 'utf8');
    if (text.includes('\0')) continue;
    files.set(path, text);
  }
  return { files };
}

const describeProblem = (p: Problem) => `${p.file}:${p.line}: ${p.message}`;

// ---------------------------------------------------------------------------------------------

describe('the reference check', () => {
  const repo = (files: Record<string, string>): Repository => ({ files: new Map(Object.entries(files)) });
  const docs = {
    'docs/design.md':
      '# Design\n\n## 5. Gaps\n\n### 5.3 When a range may burn\n\n- <a id="i1"></a>**I1, no loss.**\n',
    'docs/reliability.md': '# Reliability\n\n| <a id="c8"></a>C8 | crash |\n',
    'docs/operating.md':
      '# Operating\n\n## Behind a pooler\n\n**The fence is drawn after the row is held.**\n',
  };
  const problemsIn = (text: string, file = 'packages/x/src/a.ts') =>
    findProblems(repo({ ...docs, [file]: text })).map((p) => `${p.kind} ${p.line}: ${p.message}`);

  test('accepts references to sections, anchors and titles that exist', () => {
    expect(
      problemsIn(
        [
          '// docs/design.md §5.3, §5 and docs/reliability.md#c8, docs/design.md#i1',
          '// (docs/operating.md, \'Behind a pooler\'), docs/operating.md ("the fence is drawn after the row is held")',
          '// https://github.com/sluice-dev/sluice/blob/main/docs/design.md#53-when-a-range-may-burn',
          '// a header field token (RFC 9110 §5.6.2)',
        ].join('\n'),
      ),
    ).toEqual([]);
  });

  test('reports each dead or outside reference with its line', () => {
    expect(
      problemsIn(
        [
          // Escaped, so that this file's own text names no document outside the repository.
          '// the proof (DESIGN\u0020§5) and RELIABILITY\u002Emd §6.5',
          '// named once (CONVENTIONS\u0020C10)',
          '// docs/design.md §7 and docs/design.md §5, §9',
          '// docs/reliability.md#c9',
          '// docs/operating.md, "Why a late commit is never lost"',
          '// see docs/nowhere.md and https://github.com/sluice-dev/sluice/blob/main/docs/gone.md',
          '// fetches after the lock (§4)',
        ].join('\n'),
      ),
    ).toEqual([
      'outside 1: cites "DESIGN", a document that is not in the repository: cite docs/design.md, docs/reliability.md or CONVENTIONS.md',
      'outside 1: cites "RELIABILITY\u002Emd", a document that is not in the repository: cite docs/design.md, docs/reliability.md or CONVENTIONS.md',
      'outside 2: cites "CONVENTIONS", a document that is not in the repository: cite docs/design.md, docs/reliability.md or CONVENTIONS.md',
      'dead 3: cites docs/design.md §7, but docs/design.md has no heading numbered 7',
      'dead 3: cites docs/design.md §9, but docs/design.md has no heading numbered 9',
      'dead 4: links to docs/reliability.md#c9, but docs/reliability.md has no heading or anchor "c9"',
      'dead 5: cites docs/operating.md, "Why a late commit is never lost", but docs/operating.md has no heading or bold lead-in with that text',
      'dead 6: names docs/nowhere.md, which is not a file of the repository',
      'dead 6: links to https://github.com/sluice-dev/sluice/blob/main/docs/gone.md, but the repository has no docs/gone.md',
      'outside 7: cites a section (§) without naming its document: write docs/design.md §N',
    ]);
  });

  test('checks Markdown links and in-page anchors, and a bare § against the file itself', () => {
    expect(
      problemsIn(
        '# Guide\n\n## Metrics\n\nSee [design](design.md#5-gaps), [x](design.md#6-retention), [m](#metrics), [n](#nope), §5 and §2.\n' +
          '[design §5.3](design.md#53-when-a-range-may-burn) and [design §9](design.md#5-gaps).\n',
        'docs/guide.md',
      ),
    ).toEqual([
      'dead 5: links to design.md#6-retention, but docs/design.md has no heading or anchor "6-retention"',
      'dead 5: links to #nope, but this file has no heading or anchor "nope"',
      'dead 5: cites §5, but this file has no heading numbered 5',
      'dead 5: cites §2, but this file has no heading numbered 2',
      "dead 6: cites §9 of docs/design.md (a link's text), but it has no heading numbered 9",
    ]);
  });

  test('computes GitHub anchors from headings', () => {
    const { anchors, sections } = docTargets(
      '## 4.3 A turn, step by step\n## `SLUICE_INVALID_OPTION`\n## HTTP (Fastify plugin)\n## HTTP (Fastify plugin)\n```\n## not a heading\n```\n',
    );
    expect([...anchors]).toEqual([
      '43-a-turn-step-by-step',
      'sluice_invalid_option',
      'http-fastify-plugin',
      'http-fastify-plugin-1',
    ]);
    expect([...sections]).toEqual(['4.3']);
  });
});

describe('the repository', () => {
  const problems = findProblems(readRepository());

  test('has no reference that points outside it', () => {
    expect(problems.map(describeProblem)).toEqual([]);
  });
});

import { readFile } from 'node:fs/promises';
import { expect, test } from 'vitest';
import { OPS_STATUS_BY_CODE } from './http-errors.js';

const SECTION = '## HTTP errors of the ops routes';

test('docs/errors.md gives the HTTP status of every code the ops routes answer with', async () => {
  const doc = await readFile(new URL('../../../docs/errors.md', import.meta.url), 'utf8');
  const start = doc.indexOf(`\n${SECTION}\n`);
  expect(start, `docs/errors.md has no "${SECTION}" section`).toBeGreaterThan(-1);
  const rest = doc.slice(start + SECTION.length + 2);
  const end = rest.search(/^## /m);
  const section = end === -1 ? rest : rest.slice(0, end);
  for (const [code, status] of Object.entries(OPS_STATUS_BY_CODE)) {
    const text = section.slice(section.indexOf(`### ${code}\n`)).split(/^### /m)[1] ?? '';
    expect(text, `${code} in docs/errors.md gives its status`).toContain(`HTTP ${status}.`);
  }
});

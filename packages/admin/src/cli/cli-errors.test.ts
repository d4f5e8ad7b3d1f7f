import { readFile } from 'node:fs/promises';
import { expect, test } from 'vitest';
import { CLI_ERROR_CODES } from './exit-codes.js';

const SECTION = '## Errors of the sluice CLI';

test('docs/errors.md gives the exit code of every code of the CLI itself', async () => {
  const doc = await readFile(new URL('../../../../docs/errors.md', import.meta.url), 'utf8');
  const start = doc.indexOf(`\n${SECTION}\n`);
  expect(start, `docs/errors.md has no "${SECTION}" section`).toBeGreaterThan(-1);
  const rest = doc.slice(start + SECTION.length + 2);
  const end = rest.search(/^## /m);
  const section = end === -1 ? rest : rest.slice(0, end);
  for (const [code, exitCode] of Object.entries(CLI_ERROR_CODES)) {
    const text = section.slice(section.indexOf(`### ${code}\n`)).split(/^### /m)[1] ?? '';
    expect(text, `${code} in docs/errors.md gives its exit code`).toContain(`Exit code ${exitCode}.`);
  }
});

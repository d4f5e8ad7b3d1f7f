// The READMEs' code examples are these files, verbatim, so that what they show is what
// e2e/src/pack/install.pack.test.ts compiles against the packed packages and runs against PostgreSQL.
import { readFileSync } from 'node:fs';
import { expect, test } from 'vitest';

const read = (path: string) => readFileSync(new URL(`../${path}`, import.meta.url), 'utf8');

/** The ```ts blocks of the section with this `## ` heading, in order. */
function codeBlocks(readme: string, heading: string): string[] {
  const start = readme.indexOf(`\n## ${heading}\n`);
  if (start === -1) return [];
  const end = readme.indexOf('\n## ', start + 1);
  const section = readme.slice(start, end === -1 ? undefined : end);
  return [...section.matchAll(/\n```ts\n([\s\S]*?)\n```\n/g)].map((match) => `${match[1]}\n`);
}

test.each([
  ['README.md', 'In your Fastify app', 0, 'examples/fastify-app.ts'],
  ['README.md', 'Without Fastify', 0, 'examples/without-fastify.ts'],
  ['README.md', 'Lanes, parked keys and type filters', 0, 'examples/lanes.ts'],
  ['README.md', 'Rebuilding a projection', 0, 'examples/rebuild.ts'],
  ['packages/testing/README.md', 'vitest', 0, 'examples/testing/vitest.config.ts'],
  ['packages/testing/README.md', 'vitest', 1, 'examples/testing/orders.test.ts'],
])('%s, section "%s", code block %i is %s as it is', (readme, heading, index, file) => {
  expect(codeBlocks(read(readme), heading)[index], `copy ${file} into ${readme}`).toBe(read(file));
});

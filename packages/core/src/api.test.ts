// The package root is the documented user API (packages/core/README.md, "API"), and nothing else:
// every name index.ts exports has a row there, and every name there is exported. What Sluice's own
// packages share beyond it goes through ./internal.ts, which applications are told not to use.
import { readFile } from 'node:fs/promises';
import { expect, test } from 'vitest';
import * as root from './index.js';
import type { EventRecord, NewEvent } from './index.js';

const read = (path: string) => readFile(new URL(path, import.meta.url), 'utf8');

function exportedNames(source: string): string[] {
  return [...source.matchAll(/^export (?:type )?\{([^}]*)\}/gm)].flatMap((m) =>
    (m[1] ?? '')
      .split(',')
      .map((n) => n.trim())
      .filter(Boolean),
  );
}

test('every export of the package root is documented in its README, and nothing else is', async () => {
  const readme = await read('../README.md');
  const section = readme.slice(readme.indexOf('\n## API\n'), readme.indexOf('\n## Documentation\n'));
  expect(section.length, 'packages/core/README.md has an "## API" section').toBeGreaterThan(10);
  const documented = new Set(
    section
      .split('\n')
      .filter((line) => line.startsWith('- `'))
      .flatMap((line) => [...(line.split('`: ')[0] ?? '').matchAll(/`([A-Za-z_]+)/g)].map((m) => m[1] ?? '')),
  );
  const exported = exportedNames(await read('./index.ts'));
  expect(exported.filter((name) => !documented.has(name))).toEqual([]);
  expect([...documented].filter((name) => !exported.includes(name))).toEqual([]);
  // The parser above saw every value the module really exports.
  expect(Object.keys(root).filter((name) => !exported.includes(name))).toEqual([]);
});

test("an application's payload declared as an interface types an event (no index signature needed)", () => {
  interface OrderPlaced {
    readonly orderId: string;
    readonly totalCents: number;
  }
  const order: OrderPlaced = { orderId: 'o-1', totalCents: 900 };
  const event: NewEvent<OrderPlaced> = { streamId: 'order-o-1', type: 'OrderPlaced', data: order };
  const events: Parameters<typeof root.append>[1] = [event, { streamId: 's', type: 'T', data: order }];
  const stored = {
    id: 1n,
    metadata: {},
    createdAt: new Date(0),
    ...event,
  } satisfies EventRecord<OrderPlaced>;
  expect(events[0]?.data).toEqual({ orderId: 'o-1', totalCents: 900 });
  expect(stored.data.totalCents).toBe(900);
});

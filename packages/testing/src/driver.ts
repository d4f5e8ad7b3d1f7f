import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

/**
 * The major version of the postgres.js installed beside this package (Sluice runs on 3.4 and 4):
 * for tests that check a behaviour the two releases differ in.
 */
export const postgresJsMajor: number = (() => {
  let dir = dirname(createRequire(import.meta.url).resolve('postgres'));
  for (;;) {
    try {
      const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
        name?: unknown;
        version?: unknown;
      };
      if (manifest.name === 'postgres' && typeof manifest.version === 'string') {
        return Number(manifest.version.split('.')[0]);
      }
    } catch {
      // no package.json here: look one folder up
    }
    const up = dirname(dir);
    if (up === dir) throw new Error('cannot find the package.json of the installed postgres');
    dir = up;
  }
})();

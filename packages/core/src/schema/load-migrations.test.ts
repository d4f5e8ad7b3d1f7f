import { describe, expect, test } from 'vitest';
import { loadMigrations, renderMigration, statementsOf } from './load-migrations.js';

describe('migrations', () => {
  test('are numbered 0001, 0002, … without holes', async () => {
    const versions = (await loadMigrations()).map((m) => m.version);
    expect(versions).toEqual(versions.map((_, i) => i + 1));
  });

  test('render the schema placeholder as a quoted identifier and leave casts alone', () => {
    expect(renderMigration('create table :SLUICE_SCHEMA.events (x int default 1::int);', 'app')).toBe(
      'create table "app".events (x int default 1::int);',
    );
  });

  test('reference the schema only through the placeholder', async () => {
    for (const migration of await loadMigrations()) {
      expect(migration.text, migration.name).not.toMatch(/\bsluice\./);
    }
  });

  test('whose comments were reworded still accept the checksum they had, as their statements are unchanged', async () => {
    const former = Object.fromEntries((await loadMigrations()).map((m) => [m.version, m.formerChecksums]));
    expect(former).toMatchObject({
      1: ['f7d5fbad8112255f23076398fa5a373467976e49c7f034ce721c5a8a0a586588'],
      2: [
        '3220c00e6a961ea8b5177dc1aeb672caee9b58323bdb37edef3647c2f7f8727f',
        '367967bed34609e24e272c62d6e63164f3d58402beecb5ba1f8b10c859f64f8a',
      ],
      5: ['da3d30c1f13053cba6dc35337efd8aad3c53338b860c5b51e30aecd4c5364eba'],
    });
  });

  test('statementsOf drops whole-line comments only', () => {
    expect(statementsOf("-- why\ncreate table t (\n  -- a column\n  a int -- kept\n);\nselect '--';")).toBe(
      "create table t (\n  a int -- kept\n);\nselect '--';",
    );
  });
});

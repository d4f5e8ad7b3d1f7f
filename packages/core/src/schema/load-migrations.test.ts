import { describe, expect, test } from 'vitest';
import { loadMigrations, renderMigration } from './load-migrations.js';

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
});

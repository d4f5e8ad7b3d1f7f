import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';

export interface Migration {
  readonly version: number;
  readonly name: string;
  /** The file's text with the `:SLUICE_SCHEMA` placeholder still in it. */
  readonly text: string;
  /** sha256 of `text`: an applied migration must never change (CONVENTIONS, habits). */
  readonly checksum: string;
}

// src/schema/ and dist/schema/ sit at the same depth, so this finds packages/core/migrations from both.
const MIGRATIONS_DIR = new URL('../../migrations/', import.meta.url);
const FILE_NAME = /^(\d{4})_[a-z0-9_]+\.sql$/;

let cached: Promise<readonly Migration[]> | undefined;

/** Reads the shipped migrations once, ordered by their number. */
export function loadMigrations(): Promise<readonly Migration[]> {
  cached ??= readMigrations();
  return cached;
}

async function readMigrations(): Promise<readonly Migration[]> {
  const files = (await readdir(MIGRATIONS_DIR)).filter((file) => FILE_NAME.test(file)).sort();
  const migrations: Migration[] = [];
  for (const file of files) {
    const text = await readFile(new URL(file, MIGRATIONS_DIR), 'utf8');
    const version = Number(FILE_NAME.exec(file)?.[1]);
    if (migrations.some((m) => m.version === version)) {
      throw new Error(`Two migrations share the number ${version}: ${file}`);
    }
    migrations.push({
      version,
      name: file,
      text,
      checksum: createHash('sha256').update(text).digest('hex'),
    });
  }
  return migrations;
}

/** Replaces the psql-style `:SLUICE_SCHEMA` placeholder with the quoted schema name. */
export function renderMigration(text: string, schema: string): string {
  // `(?<!:)` keeps casts such as `x::SLUICE_SCHEMA` (never used, but cheap to rule out) intact.
  return text.replace(/(?<!:):SLUICE_SCHEMA\b/g, `"${schema}"`);
}

import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { MigrationFailedError } from '../errors.js';

export interface Migration {
  readonly version: number;
  readonly name: string;
  /** The file's text with the `:SLUICE_SCHEMA` placeholder still in it. */
  readonly text: string;
  /** sha256 of `text`: an applied migration must never change (CONVENTIONS.md#sql-and-migrations). */
  readonly checksum: string;
  /**
   * Checksums this migration had before its comments were reworded: a database that applied it
   * then holds one of them. Listed only while the statements still hash as they did.
   */
  readonly formerChecksums: readonly string[];
}

/**
 * Migrations whose whole-line comments were reworded after release (to cite docs/design.md instead
 * of a document outside the repository): the earlier file's checksum, and the checksum of its
 * statements (the text without those comments, see statementsOf). The statements are what a
 * database ran; as long as they hash the same, a database holding the earlier checksum is up to date.
 */
const REWORDED: Readonly<Record<number, readonly { checksum: string; statements: string }[]>> = {
  1: [
    {
      checksum: 'f7d5fbad8112255f23076398fa5a373467976e49c7f034ce721c5a8a0a586588',
      statements: '3ef781943396f912d2bbbfdaf21e05e6988c41f6b59298b9517ee927f36e87b3',
    },
  ],
  2: [
    {
      checksum: '3220c00e6a961ea8b5177dc1aeb672caee9b58323bdb37edef3647c2f7f8727f',
      statements: '735c0b710645636b8db0f7705b019480026e312e1861238c94e4981c0f59dfce',
    },
    {
      checksum: '367967bed34609e24e272c62d6e63164f3d58402beecb5ba1f8b10c859f64f8a',
      statements: '735c0b710645636b8db0f7705b019480026e312e1861238c94e4981c0f59dfce',
    },
  ],
  5: [
    {
      checksum: 'da3d30c1f13053cba6dc35337efd8aad3c53338b860c5b51e30aecd4c5364eba',
      statements: 'fef3ba7231ff1d1a02ee8865028c997c63cc7a14d464a913faf95b31895591c3',
    },
  ],
};

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
  const listed = await readdir(MIGRATIONS_DIR).catch((error: unknown) => {
    // Found beside the module: a bundler that copied the code into another folder leaves them behind.
    cached = undefined;
    throw new MigrationFailedError(
      0,
      'files (the migrations/ folder of @sluice/core, read beside its code: run it from node_modules, ' +
        'a bundler must keep @sluice/* external)',
      error,
    );
  });
  const files = listed.filter((file) => FILE_NAME.test(file)).sort();
  const migrations: Migration[] = [];
  for (const file of files) {
    const text = await readFile(new URL(file, MIGRATIONS_DIR), 'utf8');
    const version = Number(FILE_NAME.exec(file)?.[1]);
    if (migrations.some((m) => m.version === version)) {
      throw new Error(`Two migrations share the number ${version}: ${file}`);
    }
    const statements = sha256(statementsOf(text));
    migrations.push({
      version,
      name: file,
      text,
      checksum: sha256(text),
      formerChecksums: (REWORDED[version] ?? [])
        .filter((former) => former.statements === statements)
        .map((former) => former.checksum),
    });
  }
  return migrations;
}

/** A migration's text without its whole-line `--` comments: what a comment-only edit leaves alone. */
export function statementsOf(text: string): string {
  return text
    .split('\n')
    .filter((line) => !/^\s*--/.test(line))
    .join('\n');
}

function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

/** Replaces the psql-style `:SLUICE_SCHEMA` placeholder with the quoted schema name. */
export function renderMigration(text: string, schema: string): string {
  // `(?<!:)` keeps casts such as `x::SLUICE_SCHEMA` (never used, but cheap to rule out) intact.
  return text.replace(/(?<!:):SLUICE_SCHEMA\b/g, `"${schema}"`);
}

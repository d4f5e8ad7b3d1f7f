// vitest globalSetup (`globalSetup: ['@sluice/testing/vitest/global-setup']`): one PostgreSQL server
// per test run and one migrated template database that every test file clones (CREATE DATABASE …
// TEMPLATE is far cheaper than migrating per file).
import { randomBytes } from 'node:crypto';
import { migrate, silentLogger } from '@sluice/core';
import postgres from 'postgres';
import type { TestProject } from 'vitest/node';
import { withDatabase } from '../database-url.js';
import type {} from './provided-context.js';
import { EmbeddedServerError } from '../providers/embedded.js';
import { startPostgres } from '../start-postgres.js';

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const server = await startPostgres({
    log: (message) => {
      if (process.env['SLUICE_TEST_VERBOSE']) console.info(`[sluice:testing] ${message}`);
    },
  }).catch((error: unknown) => {
    // vitest reports a failing global setup as an unhandled error with its stack trace. When the
    // embedded server cannot run here, its one line says why and what to do; the frames (all in
    // the harness and in vitest) would only bury it.
    if (error instanceof EmbeddedServerError) error.stack = `${error.name}: ${error.message}`;
    throw error;
  });
  // Unique per run, so concurrent runs against one DATABASE_URL server do not collide.
  const template = `sluice_template_${randomBytes(4).toString('hex')}`;
  try {
    const admin = postgres(server.url, { max: 1, onnotice: () => undefined });
    try {
      await admin`create database ${admin(template)}`;
    } catch (error) {
      throw server.source === 'env' ? databaseUrlError(error) : error;
    } finally {
      await admin.end();
    }
    // Closed before any test clones it: CREATE DATABASE … TEMPLATE needs it to have no sessions.
    const templateSql = postgres(withDatabase(server.url, template), { max: 1, onnotice: () => undefined });
    try {
      await migrate(templateSql, { logger: silentLogger });
    } finally {
      await templateSql.end();
    }
  } catch (error) {
    await server.stop();
    throw error;
  }

  project.provide('sluiceServerUrl', server.url);
  project.provide('sluiceTemplateDatabase', template);

  return async () => {
    if (server.source === 'env') {
      const admin = postgres(server.url, { max: 1, onnotice: () => undefined });
      try {
        await admin`drop database if exists ${admin(template)} with (force)`;
      } finally {
        await admin.end();
      }
    }
    await server.stop();
  };
}

/**
 * The failure to make the template database on the DATABASE_URL server, as one line: the URL's
 * host and database (never its password), the server's words, and what the role needs.
 */
function databaseUrlError(error: unknown): Error {
  const code = (error as { code?: unknown } | null)?.code;
  const words = error instanceof Error ? error.message : String(error);
  const needs =
    code === '42501'
      ? ': its role needs CREATEDB (every test file gets a database of its own, cloned from a template)'
      : '';
  const failure = new Error(
    `DATABASE_URL: cannot create the tests' template database (${words}${typeof code === 'string' ? `, ${code}` : ''})${needs}`,
    { cause: error },
  );
  failure.stack = `Error: ${failure.message}`;
  return failure;
}

import { randomBytes } from 'node:crypto';
import { Script } from 'node:vm';
import { migrate, silentLogger, type Consumer } from '@sluice/core';
import { failingOn, recordingConsumer } from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import Fastify from 'fastify';
import { describe, expect, onTestFinished, test } from 'vitest';
import sluice, { bearerAuth, type OpsOptions } from '../index.js';

const db = await useTestDatabase();
const TOKEN = 'test-token-0123456789abcdef';
const auth = { authorization: `Bearer ${TOKEN}` };

const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
  "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const ASSETS = [
  { path: '/', type: 'text/html; charset=utf-8' },
  { path: '/dashboard', type: 'text/html; charset=utf-8' },
  { path: '/dashboard.js', type: 'text/javascript; charset=utf-8' },
  { path: '/dashboard.css', type: 'text/css; charset=utf-8' },
] as const;

async function build(
  consumers: readonly Consumer[] = [recordingConsumer('feed').consumer],
  ops: OpsOptions = { auth: bearerAuth(TOKEN, 'alice') },
) {
  const schema = `d_${randomBytes(4).toString('hex')}`;
  await migrate(db.sql, { schema, logger: silentLogger });
  const app = Fastify({ logger: false });
  await app.register(sluice, {
    sql: db.sql,
    schema,
    consumers,
    listen: false,
    pollIntervalMs: 60_000,
    logger: silentLogger,
    ops,
  });
  onTestFinished(() => app.close());
  await app.ready();
  return { app, schema };
}

async function assets(prefix = '/sluice') {
  const { app } = await build(undefined, { auth: bearerAuth(TOKEN), prefix });
  const get = async (path: string) => {
    const response = await app.inject({ method: 'GET', url: `${prefix}${path}`, headers: auth });
    expect(response.statusCode, path).toBe(200);
    return response.body;
  };
  return { html: await get('/dashboard'), js: await get('/dashboard.js'), css: await get('/dashboard.css') };
}

describe('ops dashboard', () => {
  test('serves the page, its script and its stylesheet with their types and a strict CSP', async () => {
    const { app } = await build();
    for (const asset of ASSETS) {
      for (const method of ['GET', 'HEAD'] as const) {
        const response = await app.inject({ method, url: `/sluice${asset.path}`, headers: auth });
        expect(response.statusCode, `${method} ${asset.path}`).toBe(200);
        expect(response.headers['content-type']).toBe(asset.type);
        expect(response.headers['content-security-policy']).toBe(CSP);
        expect(response.headers['content-security-policy']).not.toContain('unsafe-inline');
        expect(response.headers['x-content-type-options']).toBe('nosniff');
        expect(response.headers['x-frame-options']).toBe('DENY');
        expect(response.headers['referrer-policy']).toBe('no-referrer');
        expect(response.headers['cache-control']).toBe('no-store');
        if (method === 'GET') expect(response.body.length).toBeGreaterThan(100);
      }
    }
    const page = await app.inject({ method: 'GET', url: '/sluice/', headers: auth });
    const dashboard = await app.inject({ method: 'GET', url: '/sluice/dashboard', headers: auth });
    expect(page.body).toBe(dashboard.body);
    expect(page.body).toMatch(/^<!doctype html>/);
  });

  test('every dashboard route answers 401 without (or with wrong) credentials, and reveals nothing', async () => {
    const { app } = await build();
    for (const asset of ASSETS) {
      for (const headers of [
        {},
        { authorization: 'Bearer wrong-token-000000000' },
        { authorization: TOKEN },
      ]) {
        for (const method of ['GET', 'HEAD'] as const) {
          const response = await app.inject({ method, url: `/sluice${asset.path}`, headers });
          expect(response.statusCode, `${method} ${asset.path}`).toBe(401);
          expect(response.headers['content-type']).toMatch(/^application\/json/);
          if (method === 'GET') expect(response.json()).toMatchObject({ code: 'SLUICE_UNAUTHORIZED' });
        }
      }
    }
    // The bare prefix authenticates before it redirects.
    expect((await app.inject({ method: 'GET', url: '/sluice' })).statusCode).toBe(401);
  });

  test('the bare prefix redirects to the slash form, so relative URLs resolve inside the prefix', async () => {
    const { app } = await build();
    const bare = await app.inject({ method: 'GET', url: '/sluice', headers: auth });
    expect(bare.statusCode).toBe(308);
    // Relative: still right behind a proxy that mounts the app under another path.
    expect(bare.headers.location).toBe('sluice/');
    const withQuery = await app.inject({ method: 'GET', url: '/sluice?tab=1', headers: auth });
    expect(withQuery.headers.location).toBe('sluice/?tab=1');
    // Nothing else is served as a page: unknown paths keep the ops routes' JSON 404.
    for (const url of ['/sluice/dashboard.png', '/sluice/dashboard/x', '/sluice/static/dashboard.js']) {
      const response = await app.inject({ method: 'GET', url, headers: auth });
      expect(response.statusCode, url).toBe(404);
      expect(response.json()).toMatchObject({ code: 'SLUICE_ROUTE_NOT_FOUND' });
    }
  });

  test('works under a custom prefix, nested or at the root', async () => {
    for (const [prefix, location] of [
      ['/ops', 'ops/'],
      ['/admin/sluice', 'sluice/'],
    ] as const) {
      const { app } = await build(undefined, { auth: bearerAuth(TOKEN), prefix });
      for (const asset of ASSETS) {
        const response = await app.inject({ method: 'GET', url: `${prefix}${asset.path}`, headers: auth });
        expect(response.statusCode, `${prefix}${asset.path}`).toBe(200);
        expect(response.headers['content-type']).toBe(asset.type);
        expect(response.headers['content-security-policy']).toBe(CSP);
      }
      expect((await app.inject({ method: 'GET', url: prefix, headers: auth })).headers.location).toBe(
        location,
      );
      expect((await app.inject({ method: 'GET', url: '/sluice/dashboard', headers: auth })).statusCode).toBe(
        404,
      );
      // The API the page calls sits next to it.
      expect(
        (await app.inject({ method: 'GET', url: `${prefix}/consumers`, headers: auth })).statusCode,
      ).toBe(200);
    }
    const { app } = await build(undefined, { auth: bearerAuth(TOKEN), prefix: '/' });
    const root = await app.inject({ method: 'GET', url: '/', headers: auth });
    expect(root.statusCode).toBe(200);
    expect(root.headers['content-type']).toBe('text/html; charset=utf-8');
    expect((await app.inject({ method: 'GET', url: '/dashboard.js', headers: auth })).statusCode).toBe(200);
  });

  test('the page, script and stylesheet use no external or absolute URL and nothing inline', async () => {
    for (const prefix of ['/sluice', '/ops']) {
      const { html, js, css } = await assets(prefix);
      for (const [name, text] of Object.entries({ html, js, css })) {
        expect(text, name).not.toMatch(/https?:/i);
        // Protocol-relative (`//host`) or root-relative URLs in attributes, strings or url().
        expect(text, name).not.toMatch(/["'`(]\s*\/\/[^\s/]/);
        expect(text, name).not.toMatch(/(?:src|href|action)\s*=\s*["']?\//i);
        expect(text, name).not.toMatch(/@import|url\(/i);
      }
      const references = [...html.matchAll(/\b(?:src|href)\s*=\s*"([^"]*)"/g)].map((m) => m[1]);
      expect(references.sort()).toEqual(['#main', 'dashboard.css', 'dashboard.js']);
      // CSP forbids inline script and style: none is used.
      expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/);
      expect(html).toMatch(/<script src="dashboard\.js" defer><\/script>/);
      expect(html).not.toMatch(/<style|\sstyle=|\son[a-z]+=/i);
      expect(js).not.toMatch(/\.innerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function/);
    }
  });

  test('the script is a classic browser script with the stable hooks a browser test drives', async () => {
    const { html, js } = await assets();
    // Parses as a classic (non-module) script; compiling does not run it.
    expect(() => new Script(js, { filename: 'dashboard.js' })).not.toThrow();
    expect(js).not.toMatch(/^\s*(import|export)\s/m);
    for (const attribute of [
      'data-consumer',
      'data-instance',
      'data-status',
      'data-lag-events',
      'data-action',
    ]) {
      expect(js, attribute).toContain(`'${attribute}'`);
    }
    for (const action of [
      'skip',
      'restart',
      'disable',
      'enable',
      'replay',
      'fence',
      'diagnose',
      'dead-letters',
    ]) {
      expect(js, action).toContain(`'${action}'`);
    }
    expect(html).toMatch(/<button[^>]*\bdata-confirm\b/);
    expect(html).toMatch(/<div id="result"[^>]*aria-live="polite"/);
    expect(html).toMatch(/<dialog\s+id="action-dialog"/);
    expect(html).toMatch(/<a class="skip-link" href="#main">/);
    expect(html).toContain('<th scope="col">Consumer</th>');
    // Requests: same-origin credentials, JSON, and the optional bearer token.
    expect(js).toContain("credentials: 'same-origin'");
    expect(js).toContain("'content-type': 'application/json'");
    expect(js).toContain('Bearer ${token}');
    expect(js).toContain('sessionStorage');
  });

  test('in read-only mode the page still loads and tells the script so; GET is never 405', async () => {
    const { app } = await build([failingOn('mailer', (e) => e.id === 1n).consumer], {
      auth: bearerAuth(TOKEN),
      readOnly: true,
    });
    for (const asset of ASSETS) {
      const response = await app.inject({ method: 'GET', url: `/sluice${asset.path}`, headers: auth });
      expect(response.statusCode, asset.path).toBe(200);
    }
    const page = await app.inject({ method: 'GET', url: '/sluice/dashboard', headers: auth });
    expect(page.body).toContain('<body data-read-only="true">');
    const writable = await build();
    const normal = await writable.app.inject({ method: 'GET', url: '/sluice/dashboard', headers: auth });
    expect(normal.body).toContain('<body data-read-only="false">');
  });

  test('an insecure (local development) setup serves the page without credentials', async () => {
    const { app } = await build(undefined, { insecure: true });
    const response = await app.inject({ method: 'GET', url: '/sluice/' });
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-security-policy']).toBe(CSP);
  });
});

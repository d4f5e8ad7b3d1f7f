import { readdirSync } from 'node:fs';
import { type Consumer } from '@sluice/core';
import { failingOn, recordingConsumer } from '@sluice/testing';
import { useTestDatabase } from '@sluice/testing/vitest';
import { describe, expect, test } from 'vitest';
import { basicAuth, bearerAuth, type OpsAuth, type OpsOptions } from '../index.js';
import { pluginApp } from '../test-support.js';

const db = await useTestDatabase();
const TOKEN = 'test-token-0123456789abcdef';
const auth = { authorization: `Bearer ${TOKEN}` };
const OPERATOR = { username: 'ops', password: 'dashboard-test-password' };
const basic = {
  authorization: `Basic ${Buffer.from(`${OPERATOR.username}:${OPERATOR.password}`).toString('base64')}`,
};

const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
  "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/** The script modules in src/dashboard/static/ui, as the page's relative paths. */
const MODULES = readdirSync(new URL('./static/ui/', import.meta.url))
  .filter((file) => file.endsWith('.js'))
  .map((file) => `/ui/${file}`);

const HTML = 'text/html; charset=utf-8';
const JS = 'text/javascript; charset=utf-8';
const ASSETS = [
  { path: '/', type: HTML },
  { path: '/dashboard', type: HTML },
  { path: '/dashboard.js', type: JS },
  { path: '/dashboard.css', type: 'text/css; charset=utf-8' },
  ...MODULES.map((path) => ({ path, type: JS })),
] as const;

const build = (
  consumers: readonly Consumer[] = [recordingConsumer('feed').consumer],
  ops: OpsOptions = { auth: bearerAuth(TOKEN, 'alice') },
) => pluginApp(db.sql, consumers, ops, { prefix: 'd' });

/** Every file of the page, by path (under the given prefix). */
async function assets(prefix = '/sluice') {
  const { app } = await build(undefined, { auth: bearerAuth(TOKEN), prefix });
  const files = new Map<string, string>();
  for (const asset of ASSETS) {
    const response = await app.inject({ method: 'GET', url: `${prefix}${asset.path}`, headers: auth });
    expect(response.statusCode, asset.path).toBe(200);
    files.set(asset.path, response.body);
  }
  const text = (path: string) => files.get(path) ?? '';
  return {
    files,
    html: text('/dashboard'),
    css: text('/dashboard.css'),
    scripts: [...files].filter(([p]) => p.endsWith('.js')),
  };
}

/** The specifiers of a module's static imports. */
function importsOf(source: string): string[] {
  return [...source.matchAll(/^\s*import\s[^'"]*?from\s+'([^']+)';?$|^\s*import\s+'([^']+)';?$/gms)].map(
    (m) => m[1] ?? m[2] ?? '',
  );
}

describe('ops dashboard', () => {
  test('serves the page, its stylesheet and its script modules with their types and a strict CSP', async () => {
    expect(MODULES.length).toBeGreaterThanOrEqual(8);
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

  test('with Basic authentication every dashboard file answers 401 without credentials, so the browser prompts', async () => {
    const { app } = await build(undefined, { auth: basicAuth(OPERATOR) });
    for (const asset of ASSETS) {
      for (const headers of [{}, { authorization: 'Basic d3Jvbmc6d3Jvbmc=' }, auth]) {
        for (const method of ['GET', 'HEAD'] as const) {
          const response = await app.inject({ method, url: `/sluice${asset.path}`, headers });
          expect(response.statusCode, `${method} ${asset.path}`).toBe(401);
          expect(response.headers['www-authenticate']).toBe('Basic realm="sluice ops", charset="UTF-8"');
          expect(response.headers['content-type']).toMatch(/^application\/json/);
          if (method === 'GET') expect(response.json()).toMatchObject({ code: 'SLUICE_UNAUTHORIZED' });
        }
      }
      const signedIn = await app.inject({ method: 'GET', url: `/sluice${asset.path}`, headers: basic });
      expect(signedIn.statusCode, asset.path).toBe(200);
    }
    // The bare prefix authenticates before it redirects.
    expect((await app.inject({ method: 'GET', url: '/sluice' })).statusCode).toBe(401);
    const page = await app.inject({ method: 'GET', url: '/sluice/', headers: basic });
    expect(page.body).toContain('<body data-read-only="false" data-auth="browser">');
  });

  test('with a bearer token the page shell loads without credentials and holds no data; the API still answers 401', async () => {
    const { app } = await build([
      recordingConsumer('secret-projection').consumer,
      failingOn('secret-mailer', () => true, { errorPolicy: { maxAttempts: 1 } }).consumer,
    ]);
    for (const asset of ASSETS) {
      for (const method of ['GET', 'HEAD'] as const) {
        const anonymous = await app.inject({ method, url: `/sluice${asset.path}` });
        expect(anonymous.statusCode, `${method} ${asset.path}`).toBe(200);
        expect(anonymous.headers['content-type']).toBe(asset.type);
        expect(anonymous.headers['content-security-policy']).toBe(CSP);
        expect(anonymous.headers['cache-control']).toBe('no-store');
        expect(anonymous.headers['www-authenticate']).toBeUndefined();
      }
      // The same bytes as an authenticated operator gets: nothing in them depends on who asks.
      const anonymous = await app.inject({ method: 'GET', url: `/sluice${asset.path}` });
      const signedIn = await app.inject({ method: 'GET', url: `/sluice${asset.path}`, headers: auth });
      expect(anonymous.body, asset.path).toBe(signedIn.body);
      expect(anonymous.body, asset.path).not.toContain('secret-');
      expect(anonymous.body, asset.path).not.toContain(TOKEN);
    }
    const page = await app.inject({ method: 'GET', url: '/sluice/' });
    expect(page.body).toContain('<body data-read-only="false" data-auth="token">');
    // The bare prefix redirects without credentials too.
    expect((await app.inject({ method: 'GET', url: '/sluice' })).statusCode).toBe(308);

    // Every API route still wants the token; unknown paths are no page.
    for (const url of [
      '/sluice/consumers',
      '/sluice/consumers/secret-mailer',
      '/sluice/consumers/secret-mailer/diagnose',
      '/sluice/consumers/secret-mailer/events/1',
      '/sluice/consumers/secret-mailer/dead-letters',
      '/sluice/consumers/secret-mailer/dead-letters/1',
      '/sluice/audit',
      '/sluice/health',
      '/sluice/ui/nope.js',
      '/sluice/dashboard.png',
    ]) {
      const response = await app.inject({ method: 'GET', url });
      expect(response.statusCode, url).toBe(401);
      expect(response.body, url).not.toContain('secret-');
    }
    const write = await app.inject({
      method: 'POST',
      url: '/sluice/consumers/secret-mailer/restart',
      headers: { 'content-type': 'application/json' },
      payload: { from: 'now' },
    });
    expect(write.statusCode).toBe(401);
  });

  test('the shell is public exactly when the auth sends no challenge a browser prompts for', async () => {
    const custom = (challenge?: string): OpsAuth => {
      const check: OpsAuth = (request) => (request.headers['x-ops'] === 'yes' ? 'custom' : undefined);
      if (challenge !== undefined) check.challenge = challenge;
      return check;
    };
    for (const [challenge, open] of [
      [undefined, true],
      ['Bearer realm="ops"', true],
      ['Basic realm="ops"', false],
      ['Digest realm="ops", nonce="x"', false],
      ['Negotiate', false],
    ] as const) {
      const { app } = await build(undefined, { auth: custom(challenge) });
      const page = await app.inject({ method: 'GET', url: '/sluice/' });
      expect(page.statusCode, String(challenge)).toBe(open ? 200 : 401);
      expect((await app.inject({ method: 'GET', url: '/sluice/consumers' })).statusCode).toBe(401);
      expect(
        (await app.inject({ method: 'GET', url: '/sluice/consumers', headers: { 'x-ops': 'yes' } }))
          .statusCode,
      ).toBe(200);
    }
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
    for (const url of [
      '/sluice/dashboard.png',
      '/sluice/dashboard/x',
      '/sluice/static/dashboard.js',
      '/sluice/ui/nope.js',
      '/sluice/ui/types.d.ts',
      '/sluice/dashboard.html',
    ]) {
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
    expect((await app.inject({ method: 'GET', url: '/ui/api.js', headers: auth })).statusCode).toBe(200);
  });

  test('the page, its modules and its stylesheet use no external or absolute URL and nothing inline', async () => {
    for (const prefix of ['/sluice', '/ops']) {
      const { files, html } = await assets(prefix);
      for (const [name, raw] of files) {
        // The SVG namespace names a vocabulary; nothing is fetched from it.
        const text = raw.replaceAll("'http://www.w3.org/2000/svg'", "'svg-namespace'");
        expect(text, name).not.toMatch(/https?:/i);
        // Protocol-relative (`//host`) or root-relative URLs in attributes, strings or url().
        expect(text, name).not.toMatch(/["'`(]\s*\/\/[^\s/]/);
        expect(text, name).not.toMatch(/(?:src|href|action)\s*=\s*["']?\//i);
        expect(text, name).not.toMatch(/@import|url\(/i);
      }
      const references = [...html.matchAll(/\b(?:src|href)\s*=\s*"([^"]*)"/g)].map((m) => m[1]);
      expect(references.sort()).toEqual(['#main', 'dashboard.css', 'dashboard.js', 'data:,']);
      // CSP forbids inline script and style: none is used.
      expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/);
      expect(html).toMatch(/<script type="module" src="dashboard\.js"><\/script>/);
      expect(html).not.toMatch(/<style|\sstyle=|\son[a-z]+=/i);
    }
  });

  test('the script is ES modules whose imports are relative and all served, with the hooks a browser test drives', async () => {
    const { files, html, scripts } = await assets();
    const served = new Set(files.keys());
    for (const [path, source] of scripts) {
      expect(source, path).toMatch(/^\/\/ @ts-check$/m);
      expect(source, path).not.toMatch(
        /\.innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function/,
      );
      expect(source, path).not.toMatch(/\blocalStorage\s*[.[]/);
      for (const specifier of importsOf(source)) {
        expect(specifier, `${path} imports ${specifier}`).toMatch(/^\.\.?\/[a-z-/]+\.js$/);
        const resolved = new URL(specifier, `https://page.test${path}`).pathname;
        expect(served.has(resolved), `${path} imports ${resolved}, which is not served`).toBe(true);
      }
    }
    // Every module is reachable from the entry (no dead file is shipped).
    const reached = new Set<string>(['/dashboard.js']);
    for (const pending = ['/dashboard.js']; pending.length > 0;) {
      const path = pending.pop() ?? '';
      for (const specifier of importsOf(files.get(path) ?? '')) {
        const resolved = new URL(specifier, `https://page.test${path}`).pathname;
        if (!reached.has(resolved)) {
          reached.add(resolved);
          pending.push(resolved);
        }
      }
    }
    // types.js holds JSDoc types only: nothing imports it at run time.
    expect([...served].filter((p) => p.endsWith('.js') && !reached.has(p))).toEqual(['/ui/types.js']);

    const js = scripts.map(([, source]) => source).join('\n');
    for (const attribute of [
      'data-consumer',
      'data-instance',
      'data-status',
      'data-lag-events',
      'data-action',
      'data-error-state',
      'data-payload',
      'data-chart',
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
      'trends',
      'view-event',
      'view-dead-letter',
    ]) {
      expect(js, action).toContain(`'${action}'`);
    }
    expect(html).toMatch(/<button[^>]*\bdata-confirm\b/);
    expect(html).toMatch(/<div id="result"[^>]*aria-live="polite"/);
    expect(html).toMatch(/<dialog\s+id="action-dialog"/);
    expect(html).toMatch(/<dialog id="payload-dialog"[^>]*aria-labelledby="payload-title"/);
    expect(html).toMatch(/<a class="skip-link" href="#main">/);
    expect(html).toContain('>Consumer</th>');
    // The Rebuilds panel: hidden until a poll of GET rebuilds has a version on its way (or retired).
    expect(html).toMatch(/<section id="rebuilds"[^>]*\bhidden>/);
    expect(js).toContain("api('GET', 'rebuilds')");
    // Requests: same-origin credentials, JSON, and the bearer token from sessionStorage.
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
    expect(page.body).toContain('<body data-read-only="true" data-auth="token">');
    const writable = await build();
    const normal = await writable.app.inject({ method: 'GET', url: '/sluice/dashboard', headers: auth });
    expect(normal.body).toContain('<body data-read-only="false" data-auth="token">');
  });

  test('an insecure (local development) setup serves the page without credentials', async () => {
    const { app } = await build(undefined, { insecure: true });
    const response = await app.inject({ method: 'GET', url: '/sluice/' });
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-security-policy']).toBe(CSP);
  });
});

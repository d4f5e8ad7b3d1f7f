import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { OpsContext } from '../routes/context.js';

/**
 * The dashboard's Content-Security-Policy: no inline script or style, no external resource, no
 * framing. The page only talks to the ops routes of its own origin.
 */
export const DASHBOARD_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "connect-src 'self'",
  "img-src 'self' data:",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

/**
 * The browser files live in `static/`, not next to this module: `dashboard.ts` compiles to
 * `dist/dashboard/dashboard.js`, which a copied browser `dashboard.js` would overwrite. The build
 * copies `src/dashboard/static/` to `dist/dashboard/static/`.
 */
const STATIC_DIR = new URL('./static/', import.meta.url);

interface Asset {
  readonly body: Buffer;
  readonly contentType: string;
}

function readAsset(file: string, contentType: string): Asset {
  const url = new URL(file, STATIC_DIR);
  try {
    return { body: readFileSync(url), contentType };
  } catch (error) {
    throw new Error(
      `@sluice/fastify: cannot read the ops dashboard file ${fileURLToPath(url)}; ` +
        'the package build must copy src/dashboard/static/ to dist/dashboard/static/',
      { cause: error },
    );
  }
}

function send(reply: FastifyReply, asset: Asset): FastifyReply {
  return reply
    .header('content-type', asset.contentType)
    .header('content-security-policy', DASHBOARD_CSP)
    .header('x-content-type-options', 'nosniff')
    .header('x-frame-options', 'DENY')
    .header('referrer-policy', 'no-referrer')
    .header('cache-control', 'no-store')
    .send(asset.body);
}

/** The path of a request URL, without its query string. */
function pathOf(request: FastifyRequest): { path: string; query: string } {
  const at = request.url.indexOf('?');
  return at === -1
    ? { path: request.url, query: '' }
    : { path: request.url.slice(0, at), query: request.url.slice(at) };
}

/**
 * The ops dashboard (DESIGN §8): one static page, its script and its stylesheet, behind the same
 * authentication as the ops routes (they are registered in the ops routes' encapsulated context).
 * The page uses relative URLs only, so it works under any prefix: it is served at `<prefix>/` and
 * `<prefix>/dashboard`; the bare `<prefix>` redirects to `<prefix>/` so that relative URLs resolve
 * inside the prefix. The files are read once, here: a missing file fails the registration.
 */
export function dashboardRoutes(app: FastifyInstance, context: OpsContext): void {
  const template = readAsset('dashboard.html', 'text/html; charset=utf-8');
  const page: Asset = {
    ...template,
    // The page disables its action buttons on a read-only server (which answers 405 anyway).
    body: Buffer.from(
      template.body
        .toString('utf8')
        .replace('data-read-only="false"', `data-read-only="${String(context.ops.readOnly)}"`),
    ),
  };
  const script = readAsset('dashboard.js', 'text/javascript; charset=utf-8');
  const stylesheet = readAsset('dashboard.css', 'text/css; charset=utf-8');

  app.get('/', {
    handler: async (request, reply) => {
      const { path, query } = pathOf(request);
      if (!path.endsWith('/')) {
        // `/sluice` → `sluice/`: a relative Location keeps working behind a proxy that adds a prefix.
        const last = path.slice(path.lastIndexOf('/') + 1);
        return reply.redirect(`${last}/${query}`, 308);
      }
      return send(reply, page);
    },
  });
  app.get('/dashboard', {
    handler: async (request, reply) => {
      const { path, query } = pathOf(request);
      // Only reachable with the app's ignoreTrailingSlash: relative URLs need the slash-less path.
      if (path.endsWith('/')) return reply.redirect(`../dashboard${query}`, 308);
      return send(reply, page);
    },
  });
  app.get('/dashboard.js', { handler: async (_request, reply) => send(reply, script) });
  app.get('/dashboard.css', { handler: async (_request, reply) => send(reply, stylesheet) });
}

import { readdirSync, readFileSync } from 'node:fs';
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
 * copies the page, its stylesheet and its script modules from `src/dashboard/static/` to
 * `dist/dashboard/static/`.
 */
const STATIC_DIR = new URL('./static/', import.meta.url);

/** The files served besides the page, by extension; anything else in `static/` is not served. */
const CONTENT_TYPES: Readonly<Record<string, string>> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
};

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
      `@sluice/fastify: cannot read the ops dashboard file ${fileURLToPath(url)}; it ships in the ` +
        "package's dist/dashboard/static/ and is read beside the plugin's code: run @sluice/fastify " +
        'from node_modules (a bundler must keep @sluice/* external)',
      { cause: error },
    );
  }
}

/** The stylesheet and script modules under `static/`, as paths relative to it (`ui/api.js`). */
function assetPaths(): string[] {
  let entries: string[];
  try {
    entries = readdirSync(STATIC_DIR, { recursive: true, encoding: 'utf8' });
  } catch (error) {
    throw new Error(
      `@sluice/fastify: cannot list the ops dashboard files in ${fileURLToPath(STATIC_DIR)} (run the ` +
        'plugin from node_modules: a bundler must keep @sluice/* external)',
      {
        cause: error,
      },
    );
  }
  return entries
    .map((entry) => entry.split('\\').join('/'))
    .filter((path) => Object.keys(CONTENT_TYPES).some((extension) => path.endsWith(extension)))
    .sort();
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
 * Authentication schemes for which a browser asks the user and retries a page load by itself. With
 * any other `ops.auth` (a bearer token, a custom check) a browser cannot sign in to a page load.
 */
const BROWSER_PROMPTED = /^\s*(basic|digest|negotiate|ntlm)\b/i;

/**
 * Whether the page shell (the page, its stylesheet and script modules; no data) is served without
 * credentials. It is when the browser could not supply them to a page load: `ops.auth` sends no
 * challenge a browser prompts for (a bearer token, a custom check). The page then asks for the
 * token and sends it with every API call; the API routes still answer 401 without it. With Basic
 * authentication the shell stays behind it, so the browser's own prompt appears on opening it.
 */
export function shellIsPublic(context: OpsContext): boolean {
  const challenge = (context.ops.auth as { challenge?: unknown } | undefined)?.challenge;
  return !(typeof challenge === 'string' && BROWSER_PROMPTED.test(challenge));
}

/**
 * The ops dashboard (docs/operating.md, "Dashboard"): one static page, its stylesheet and its
 * script modules, registered in the ops routes' encapsulated context. They are marked `shell`:
 * the ops routes' authentication lets them through when {@link shellIsPublic}, and guards them like
 * every other route otherwise. The page uses relative URLs only, so it works under any prefix: it
 * is served at `<prefix>/` and `<prefix>/dashboard`; the bare `<prefix>` redirects to `<prefix>/`
 * so that relative URLs resolve inside the prefix. The files are read once, here: a missing file
 * fails the registration.
 */
export function dashboardRoutes(app: FastifyInstance, context: OpsContext): void {
  const template = readAsset('dashboard.html', 'text/html; charset=utf-8');
  const page: Asset = {
    ...template,
    // The page hides its write actions on a read-only server (which answers 405 anyway), and
    // asks for a token only where the browser cannot prompt for credentials.
    body: Buffer.from(
      template.body
        .toString('utf8')
        .replace('data-read-only="false"', `data-read-only="${String(context.ops.readOnly)}"`)
        .replace('data-auth="browser"', `data-auth="${shellIsPublic(context) ? 'token' : 'browser'}"`),
    ),
  };
  const config = { shell: true };

  app.get('/', {
    config,
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
    config,
    handler: async (request, reply) => {
      const { path, query } = pathOf(request);
      // Only reachable with the app's ignoreTrailingSlash: relative URLs need the slash-less path.
      if (path.endsWith('/')) return reply.redirect(`../dashboard${query}`, 308);
      return send(reply, page);
    },
  });
  for (const path of assetPaths()) {
    const extension = path.slice(path.lastIndexOf('.'));
    const asset = readAsset(path, CONTENT_TYPES[extension] ?? 'application/octet-stream');
    app.get(`/${path}`, { config, handler: async (_request, reply) => send(reply, asset) });
  }
}

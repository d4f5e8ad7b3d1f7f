// The checks a write to the ops routes passes before its body is read: it comes from the ops
// routes' own origin (or one the options allow), and its body is JSON. Together they keep a page on
// another site from using an operator's browser, and the Basic credentials it caches, to act on
// consumers (docs/operating.md, "Cross-site requests").
import type { IncomingHttpHeaders } from 'node:http';

/** Methods that may change state: every one of them is a write, whatever the route says. */
export const WRITE_METHODS: ReadonlySet<string> = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

// A header field token (RFC 9110 §5.6.2) and a quoted string without escapes or controls.
const TOKEN = "[!#$%&'*+.^_`|~0-9A-Za-z-]+";
const QUOTED = '"[^"\\\\\\u0000-\\u001f\\u007f]*"';
/**
 * `application/json`, then parameters separated by `;` with spaces around them. Tabs, commas,
 * other types and anything after the parameters are refused: only what browsers and HTTP clients
 * send for JSON passes, so no parser can disagree with this check about what the body is.
 */
const JSON_MEDIA_TYPE = new RegExp(`^application/json((?: *; *${TOKEN}=(?:${TOKEN}|${QUOTED}))*) *$`, 'i');
const PARAMETER = new RegExp(`; *(${TOKEN})=(${TOKEN}|${QUOTED})`, 'g');

/**
 * Why a write request's Content-Type is not acceptable, or undefined when it is `application/json`
 * (with parameters; a charset must be UTF-8, the only encoding JSON has). A write without any
 * Content-Type is refused too, body or not: an action without parameters takes `{}`.
 */
export function unsupportedBodyType(headers: IncomingHttpHeaders): string | undefined {
  const type = headers['content-type'];
  const refuse = (got: string) =>
    `The Sluice ops write routes accept only a JSON body with Content-Type: application/json (${got}); ` +
    'send {} for an action without parameters';
  if (type === undefined) return refuse('the request has no Content-Type');
  const match = JSON_MEDIA_TYPE.exec(type);
  if (!match) return refuse(`got ${JSON.stringify(type.slice(0, 100))}`);
  for (const [, name = '', raw = ''] of (match[1] ?? '').matchAll(PARAMETER)) {
    const value = raw.startsWith('"') ? raw.slice(1, -1) : raw;
    if (name.toLowerCase() === 'charset' && value.toLowerCase() !== 'utf-8') {
      return refuse(`got charset ${JSON.stringify(value.slice(0, 40))}; JSON is UTF-8`);
    }
  }
  return undefined;
}

/** What the cross-site check needs of a request (a FastifyRequest has it). */
export interface RequestOrigin {
  readonly headers: IncomingHttpHeaders;
  /** `http` or `https`: from the socket, or X-Forwarded-Proto when Fastify's `trustProxy` trusts it. */
  readonly protocol: string | undefined;
  /** Host and port: the Host header, or X-Forwarded-Host when Fastify's `trustProxy` trusts it. */
  readonly host: string;
}

/**
 * The origin the request was sent to, as a browser would write it in `Origin` (lower case, no
 * default port), or undefined when the host is missing or not a plain `host[:port]`.
 */
export function ownOrigin(request: RequestOrigin): string | undefined {
  const { protocol, host } = request;
  if ((protocol !== 'http' && protocol !== 'https') || host === '' || /[\s/?#@\\]/.test(host)) {
    return undefined;
  }
  try {
    return new URL(`${protocol}://${host}`).origin;
  } catch {
    return undefined;
  }
}

/** One header's value; a repeated header is never trusted (it is treated as foreign). */
function single(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value.join(', ') : value;
}

/**
 * Why a write request comes from another site, or undefined when it does not (or when its origin
 * is one of `allowedOrigins`). A browser's `Sec-Fetch-Site` decides when it is there: the browser
 * computes it from the page that made the request, which no page can forge, and it stays right
 * behind a proxy that rewrites Host. Without it (older browsers, or plain HTTP to a host other
 * than localhost, where browsers leave it out) `Origin` must be the request's own origin. A request
 * with neither header does not come from a web page's script or form in a current browser (curl,
 * scripts, the CLI), so it passes; a form from an old browser that sends neither still meets the
 * JSON-only rule, which no cross-site form can satisfy.
 */
export function crossSiteProblem(
  request: RequestOrigin,
  allowedOrigins: ReadonlySet<string>,
): string | undefined {
  const origin = single(request.headers.origin);
  const site = single(request.headers['sec-fetch-site']);
  if (origin !== undefined && allowedOrigins.has(origin)) return undefined;
  const hint = allowedOrigins.size === 0 ? '' : ' (nor one of ops.allowedOrigins)';
  if (site !== undefined) {
    if (site === 'same-origin' || site === 'none') return undefined;
    return (
      `Cross-site write refused: the browser reports Sec-Fetch-Site: ${JSON.stringify(site.slice(0, 40))}` +
      `${origin === undefined ? '' : ` from ${JSON.stringify(origin.slice(0, 200))}`}, not this origin${hint}. ` +
      'To act from another origin, list it in ops.allowedOrigins'
    );
  }
  if (origin === undefined) return undefined;
  const own = ownOrigin(request);
  if (origin === own) return undefined;
  return (
    `Cross-site write refused: Origin ${JSON.stringify(origin.slice(0, 200))} is not this server's origin ` +
    `${own === undefined ? '(no valid Host)' : JSON.stringify(own)}${hint}. Behind a reverse proxy, set ` +
    "Fastify's trustProxy so that X-Forwarded-Host and X-Forwarded-Proto count, or list the public " +
    'origin in ops.allowedOrigins'
  );
}

/**
 * `value` when it is an exact origin as browsers send it in `Origin` (`https://host[:port]`: lower
 * case, no default port, no path, no trailing slash, no user info, no wildcard); otherwise the
 * problem, with the exact spelling when there is one.
 */
export function exactOriginProblem(value: unknown): string | undefined {
  if (typeof value !== 'string') return `${String(value)} is not a string`;
  const quoted = JSON.stringify(value);
  if (value.includes('*')) return `${quoted} has a wildcard; list each origin exactly`;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return `${quoted} is not an origin such as https://ops.example.com`;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return `${quoted} is not http(s)`;
  if (url.origin !== value) {
    return `${quoted} is not written as browsers send an origin; write ${JSON.stringify(url.origin)}`;
  }
  return undefined;
}

import { InvalidOptionError, type DispatcherOptions, type Logger } from '@sluice/core';
import { ADMIN_DEFAULTS, MAX_LOCK_TIMEOUT_MS, MAX_MS } from '@sluice/core/internal';
import type { FastifyRequest } from 'fastify';
import { exactOriginProblem } from './write-guard.js';

/** What `ops.redact` is given: an event payload an operator is about to see (a dead letter, one event). */
export interface RedactInput {
  readonly type: string;
  readonly streamId: string;
  readonly data: Record<string, unknown>;
  readonly metadata: Record<string, unknown>;
}

export interface OpsOptions {
  /** Where the ops routes and the dashboard live. @defaultValue '/sluice' */
  prefix?: string;
  /**
   * Authenticates an ops request: resolves to the actor (recorded in the audit), or to
   * undefined/false (or throws) to answer 401. Required unless `insecure`.
   */
  auth?: (request: FastifyRequest) => string | false | undefined | Promise<string | false | undefined>;
  /** Serve ops routes without authentication: local development only, logged loudly at boot. */
  insecure?: boolean;
  /** Write routes answer 405; reads still work. @defaultValue false */
  readOnly?: boolean;
  /**
   * Applied to every event payload before an operator sees it: the dead-letter list, one dead
   * letter, one event (the dashboard's payload views). Only the `data` and `metadata` it returns
   * are used. @defaultValue shown unchanged
   */
  redact?: (event: RedactInput) => { data: unknown; metadata: unknown };
  /** How long an action waits for a consumer row a turn holds. @defaultValue 2_000 */
  lockTimeoutMs?: number;
  /**
   * How long an ops request waits for the database before it answers 503
   * (`SLUICE_DATABASE_UNAVAILABLE`): a database that stopped answering (a network that drops
   * packets) otherwise leaves the request without an answer. Longer than `lockTimeoutMs`.
   * @defaultValue lockTimeoutMs + 10_000
   */
  requestTimeoutMs?: number;
  /**
   * Other origins whose pages may send writes (e.g. `['https://console.example.com']`): exact
   * origins as browsers send them in `Origin`, no wildcards. Writes from any other site are
   * refused with 403 (docs/operating.md, "Cross-site requests").
   * @defaultValue none: writes only from the ops routes' own origin
   */
  allowedOrigins?: readonly string[];
}

export interface SluicePluginOptions extends Omit<DispatcherOptions, 'logger'> {
  /** @defaultValue the Fastify instance's logger */
  logger?: Logger;
  /** Run the migrations in onReady, before the dispatcher starts. @defaultValue true */
  migrate?: boolean;
  /** Register the ops routes (never open by default: they need `auth` or `insecure`). */
  ops?: OpsOptions;
}

export interface ResolvedOps {
  readonly prefix: string;
  readonly auth: OpsOptions['auth'];
  readonly insecure: boolean;
  readonly readOnly: boolean;
  readonly redact: NonNullable<OpsOptions['redact']>;
  readonly lockTimeoutMs: number;
  readonly requestTimeoutMs: number;
  readonly allowedOrigins: ReadonlySet<string>;
}

/** By default an ops request waits this much longer than lockTimeoutMs for the database. */
const REQUEST_TIMEOUT_MARGIN_MS = 10_000;

const OPS_KEYS: readonly string[] = [
  'prefix',
  'auth',
  'insecure',
  'readOnly',
  'redact',
  'lockTimeoutMs',
  'requestTimeoutMs',
  'allowedOrigins',
] satisfies readonly (keyof OpsOptions)[];

/**
 * Validates the ops options. Ops routes are never open by default (docs/design.md §8): without `auth`
 * they need an explicit `insecure: true`.
 * @throws {InvalidOptionError}
 */
export function resolveOps(ops: OpsOptions | undefined): ResolvedOps | undefined {
  if (ops === undefined) return undefined;
  const given: unknown = ops; // from JavaScript, anything
  if (typeof given !== 'object' || given === null || Array.isArray(given)) {
    throw new InvalidOptionError('ops', 'must be an object of ops options');
  }
  // A misspelt option (readonly for readOnly) would otherwise be dropped, and the routes it was
  // meant to close stay open.
  for (const key of Object.keys(ops)) {
    if (!OPS_KEYS.includes(key)) {
      throw new InvalidOptionError(`ops.${key}`, `is not an ops option (they are ${OPS_KEYS.join(', ')})`);
    }
  }
  for (const key of ['insecure', 'readOnly'] as const) {
    // null as left out (false), as for every other option.
    const value: unknown = ops[key];
    if (value !== undefined && value !== null && typeof value !== 'boolean') {
      throw new InvalidOptionError(`ops.${key}`, 'must be true or false (a boolean, not a string)');
    }
  }
  if (ops.redact !== undefined && typeof ops.redact !== 'function') {
    throw new InvalidOptionError('ops.redact', 'must be a function (event) => ({ data, metadata })');
  }
  const prefix = ops.prefix ?? '/sluice';
  if (
    typeof prefix !== 'string' ||
    !/^\/[A-Za-z0-9._~\-/]*$/.test(prefix) ||
    prefix
      .split('/')
      .some((segment, i, all) => (segment === '' && i > 0 && i < all.length - 1) || /^\.\.?$/.test(segment))
  ) {
    throw new InvalidOptionError(
      'ops.prefix',
      "must be a path starting with '/', without '.', '..' or empty segments",
    );
  }
  if (ops.auth !== undefined && typeof ops.auth !== 'function') {
    throw new InvalidOptionError('ops.auth', 'must be a function (request) => actor | undefined');
  }
  const insecure = ops.insecure === true;
  if (insecure && ops.auth !== undefined) {
    throw new InvalidOptionError('ops.insecure', 'cannot be combined with ops.auth: pick one');
  }
  if (ops.auth === undefined && !insecure) {
    throw new InvalidOptionError(
      'ops.auth',
      'is required to register the ops routes (they can restart consumers and skip events); ' +
        'pass ops.auth, or ops.insecure: true for local development only',
    );
  }
  const allowedOrigins = ops.allowedOrigins ?? [];
  if (!Array.isArray(allowedOrigins)) {
    throw new InvalidOptionError(
      'ops.allowedOrigins',
      'must be an array of origins such as https://ops.example.com',
    );
  }
  for (const origin of allowedOrigins as unknown[]) {
    const problem = exactOriginProblem(origin);
    if (problem !== undefined) throw new InvalidOptionError('ops.allowedOrigins', problem);
  }
  // Checked here, under its own name, with createAdmin()'s range.
  const lockTimeoutMs = ops.lockTimeoutMs ?? ADMIN_DEFAULTS.lockTimeoutMs;
  if (!Number.isSafeInteger(lockTimeoutMs) || lockTimeoutMs < 1 || lockTimeoutMs > MAX_LOCK_TIMEOUT_MS) {
    throw new InvalidOptionError(
      'ops.lockTimeoutMs',
      `must be an integer from 1 to ${MAX_LOCK_TIMEOUT_MS} (ms)`,
    );
  }
  // Longer than an action's wait for a row: a busy row is its 409, not this 503.
  const requestTimeoutMs = ops.requestTimeoutMs ?? lockTimeoutMs + REQUEST_TIMEOUT_MARGIN_MS;
  if (
    !Number.isSafeInteger(requestTimeoutMs) ||
    requestTimeoutMs <= lockTimeoutMs ||
    requestTimeoutMs > MAX_MS
  ) {
    throw new InvalidOptionError(
      'ops.requestTimeoutMs',
      `must be an integer above ops.lockTimeoutMs (${lockTimeoutMs}) and at most ${MAX_MS} (ms)`,
    );
  }
  return {
    prefix: prefix.replace(/\/$/, '') || '/',
    auth: ops.auth,
    insecure,
    readOnly: ops.readOnly === true,
    redact: ops.redact ?? ((event) => ({ data: event.data, metadata: event.metadata })),
    lockTimeoutMs,
    requestTimeoutMs,
    allowedOrigins: new Set(allowedOrigins),
  };
}

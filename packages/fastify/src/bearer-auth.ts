import { createHash, timingSafeEqual } from 'node:crypto';
import { InvalidOptionError } from '@sluice/core';
import type { FastifyRequest } from 'fastify';

/** An `ops.auth` function; `challenge`, when set, is sent as WWW-Authenticate with a 401. */
export type OpsAuth = ((
  request: FastifyRequest,
) => string | false | undefined | Promise<string | false | undefined>) & {
  challenge?: string;
};

function digest(value: string): Buffer {
  return createHash('sha256').update(value).digest();
}

/**
 * The credentials of an Authorization header of `scheme`, or undefined for another scheme. The
 * scheme is case-insensitive (RFC 9110 §11.1): `bearer` and `BASIC` are the same schemes.
 */
function credentialsOf(header: unknown, scheme: 'Bearer' | 'Basic'): string | undefined {
  if (typeof header !== 'string' || header.length <= scheme.length || header[scheme.length] !== ' ')
    return undefined;
  return header.slice(0, scheme.length).toLowerCase() === scheme.toLowerCase()
    ? header.slice(scheme.length + 1)
    : undefined;
}

/** Constant-time equality of two strings (hashed first, so their lengths never leak). */
function same(given: string, expected: Buffer): boolean {
  return timingSafeEqual(digest(given), expected);
}

/**
 * An `ops.auth` that accepts `Authorization: Bearer <token>` for one shared token, compared in
 * constant time. Resolves to `actor`.
 * @throws {InvalidOptionError} when the token is shorter than 16 characters
 */
export function bearerAuth(token: string, actor = 'ops-token'): OpsAuth {
  if (typeof token !== 'string' || token.length < 16) {
    throw new InvalidOptionError('token', 'bearerAuth needs a string of at least 16 characters');
  }
  const expected = digest(token);
  return (request) => {
    const given = credentialsOf(request.headers.authorization, 'Bearer');
    return given !== undefined && same(given, expected) ? actor : undefined;
  };
}

/**
 * An `ops.auth` for HTTP Basic authentication (browsers prompt for it, so the dashboard works
 * without a login page). Compares in constant time; the actor is the user name.
 * @throws {InvalidOptionError} for a user name with ":" or a password shorter than 12 characters
 */
export function basicAuth(credentials: { username: string; password: string }): OpsAuth {
  const { username, password } = credentials;
  if (!username || username.includes(':') || typeof password !== 'string' || password.length < 12) {
    throw new InvalidOptionError(
      'credentials',
      'basicAuth needs a user name without ":" and a password of at least 12 characters',
    );
  }
  const expected = digest(`${username}:${password}`);
  const auth: OpsAuth = (request) => {
    const given = credentialsOf(request.headers.authorization, 'Basic');
    if (given === undefined) return undefined;
    return same(Buffer.from(given, 'base64').toString('utf8'), expected) ? username : undefined;
  };
  auth.challenge = 'Basic realm="sluice ops", charset="UTF-8"';
  return auth;
}

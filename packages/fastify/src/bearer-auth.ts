import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyRequest } from 'fastify';

/**
 * An `ops.auth` that accepts `Authorization: Bearer <token>` for one shared token, compared in
 * constant time (both sides hashed first, so their lengths never leak). Resolves to `actor`.
 */
export function bearerAuth(
  token: string,
  actor = 'ops-token',
): (request: FastifyRequest) => string | undefined {
  if (typeof token !== 'string' || token.length < 16) {
    throw new Error('bearerAuth: the token must be a string of at least 16 characters');
  }
  const expected = createHash('sha256').update(token).digest();
  return (request) => {
    const header = request.headers.authorization;
    if (typeof header !== 'string' || !header.startsWith('Bearer ')) return undefined;
    const given = createHash('sha256').update(header.slice('Bearer '.length)).digest();
    return timingSafeEqual(given, expected) ? actor : undefined;
  };
}

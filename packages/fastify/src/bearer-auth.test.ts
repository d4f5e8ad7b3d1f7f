import { InvalidOptionError } from '@sluice/core';
import { describe, expect, test } from 'vitest';
import { basicAuth, bearerAuth } from './bearer-auth.js';

describe('auth helpers refuse weak credentials with a typed error', () => {
  test('bearerAuth: a token shorter than 16 characters', () => {
    expect(() => bearerAuth('short-token')).toThrow(InvalidOptionError);
    expect(() => bearerAuth('short-token')).toThrow(
      expect.objectContaining({ code: 'SLUICE_INVALID_OPTION', option: 'token' }),
    );
    expect(typeof bearerAuth('a-token-of-16-ch')).toBe('function');
  });

  test('basicAuth: a user name with a colon, or a password shorter than 12 characters', () => {
    expect(() => basicAuth({ username: 'ops:admin', password: 'long-enough-pw' })).toThrow(
      expect.objectContaining({ code: 'SLUICE_INVALID_OPTION', option: 'credentials' }),
    );
    expect(() => basicAuth({ username: 'ops', password: 'short' })).toThrow(InvalidOptionError);
    expect(typeof basicAuth({ username: 'ops', password: 'long-enough-pw' })).toBe('function');
  });
});

describe('the Authorization scheme is case-insensitive (RFC 9110), the credentials are not', () => {
  const request = (authorization?: string) =>
    ({ headers: authorization === undefined ? {} : { authorization } }) as Parameters<
      ReturnType<typeof bearerAuth>
    >[0];

  test('bearerAuth', () => {
    const auth = bearerAuth('a-token-of-16-ch', 'ops');
    for (const scheme of ['Bearer', 'bearer', 'BEARER'])
      expect(auth(request(`${scheme} a-token-of-16-ch`)), scheme).toBe('ops');
    for (const header of [
      'bearer A-TOKEN-OF-16-CH',
      'Bearera-token-of-16-ch',
      'Bearer',
      'Basic a-token-of-16-ch',
    ])
      expect(auth(request(header)), header).toBeUndefined();
    expect(auth(request())).toBeUndefined();
  });

  test('basicAuth', () => {
    const auth = basicAuth({ username: 'ops', password: 'long-enough-pw' });
    const encoded = Buffer.from('ops:long-enough-pw').toString('base64');
    for (const scheme of ['Basic', 'basic', 'BASIC'])
      expect(auth(request(`${scheme} ${encoded}`)), scheme).toBe('ops');
    expect(auth(request(`Bearer ${encoded}`))).toBeUndefined();
    expect(auth(request(`Basic ${Buffer.from('ops:wrong-password').toString('base64')}`))).toBeUndefined();
  });
});

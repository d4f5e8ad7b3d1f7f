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

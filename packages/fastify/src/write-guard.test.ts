import { describe, expect, test } from 'vitest';
import { crossSiteProblem, exactOriginProblem, ownOrigin, unsupportedBodyType } from './write-guard.js';

describe('ownOrigin', () => {
  test.each([
    ['http', 'localhost:3000', 'http://localhost:3000'],
    ['http', 'localhost:80', 'http://localhost'],
    ['https', 'OPS.Example.com:443', 'https://ops.example.com'],
    ['http', '[::1]:3000', 'http://[::1]:3000'],
    ['http', '127.0.0.1', 'http://127.0.0.1'],
  ])('%s with Host %s is %s, as a browser writes Origin', (protocol, host, origin) => {
    expect(ownOrigin({ protocol, host, headers: {} })).toBe(origin);
  });

  test.each([
    ['http', ''],
    ['http', 'evil.example/x'],
    ['http', 'user@ops.example.com'],
    ['http', 'ops.example.com?x'],
    ['http', 'ops example'],
    ['ftp', 'ops.example.com'],
    [undefined, 'ops.example.com'],
  ])('%s with Host %j has no origin', (protocol, host) => {
    expect(ownOrigin({ protocol, host, headers: {} })).toBeUndefined();
  });
});

describe('crossSiteProblem', () => {
  const request = (headers: Record<string, string | string[]>) => ({
    protocol: 'http',
    host: 'localhost:3000',
    headers,
  });
  const none = new Set<string>();

  test('a repeated Origin or Sec-Fetch-Site header is never taken as the own origin', () => {
    expect(
      crossSiteProblem(request({ origin: ['http://localhost:3000', 'https://evil.example'] }), none),
    ).toContain('Cross-site write refused');
    expect(crossSiteProblem(request({ 'sec-fetch-site': ['same-origin', 'cross-site'] }), none)).toContain(
      'Sec-Fetch-Site',
    );
  });

  test('the message names what the browser sent and how to allow an origin', () => {
    const message = crossSiteProblem(
      request({ origin: 'https://console.example.com', 'sec-fetch-site': 'cross-site' }),
      none,
    );
    expect(message).toContain('"cross-site"');
    expect(message).toContain('"https://console.example.com"');
    expect(message).toContain('ops.allowedOrigins');
    expect(crossSiteProblem(request({ origin: 'https://x.example' }), none)).toContain('trustProxy');
  });
});

describe('unsupportedBodyType', () => {
  test.each([
    'application/json',
    'application/json;charset=utf-8',
    'application/json; charset="utf-8"',
    'APPLICATION/JSON; CHARSET=UTF-8',
    'application/json; foo=bar; charset=utf-8',
  ])('accepts %j', (type) => {
    expect(unsupportedBodyType({ 'content-type': type })).toBeUndefined();
  });

  test.each([
    'application/json\t;',
    'application/json;charset=utf-8\t',
    'application/json; charset=latin1',
    'application/json; charset="utf-8',
    'application/json; charset',
    'application/json;;',
    'application/json x',
    'application/jsonp',
    'application/problem+json',
    ' application/json',
    'text/json',
  ])('refuses %j', (type) => {
    expect(unsupportedBodyType({ 'content-type': type })).toMatch(/application\/json/);
  });
});

describe('exactOriginProblem', () => {
  test.each(['https://ops.example.com', 'http://localhost:3000', 'http://[::1]:8080'])(
    'accepts %s',
    (origin) => {
      expect(exactOriginProblem(origin)).toBeUndefined();
    },
  );

  test('suggests the exact spelling of an origin written differently', () => {
    expect(exactOriginProblem('https://OPS.example.com:443/')).toContain('"https://ops.example.com"');
    expect(exactOriginProblem('https://user:pw@ops.example.com')).toContain('"https://ops.example.com"');
  });
});

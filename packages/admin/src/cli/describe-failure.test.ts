import {
  ConsumerNotFoundError,
  GapHeldError,
  KeyNotParkedError,
  LaneChangeInProgressError,
} from '@sluice/core';
import { expect, test } from 'vitest';
import { describeFailure } from './describe-failure.js';
import { EXIT_CODES } from './exit-codes.js';

test('a key that is not parked is not found (exit 3), as a consumer is; a lane change still draining refuses (exit 4)', () => {
  const notParked = new KeyNotParkedError('reactor', 's-1');
  expect(describeFailure(notParked, 'sluice')).toEqual({
    exitCode: EXIT_CODES.notFound,
    code: 'SLUICE_KEY_NOT_PARKED',
    message: notParked.message,
  });
  expect(describeFailure(new ConsumerNotFoundError('reactor'), 'sluice').exitCode).toBe(EXIT_CODES.notFound);
  expect(describeFailure(new GapHeldError(7n), 'sluice').exitCode).toBe(EXIT_CODES.refused);

  const draining = new LaneChangeInProgressError('reactor', 3, 4);
  expect(describeFailure(draining, 'sluice')).toEqual({
    exitCode: EXIT_CODES.refused,
    code: 'SLUICE_LANE_CHANGE_IN_PROGRESS',
    message: draining.message,
  });
});

test('a TLS handshake that fails (a server or pooler without TLS) cannot reach the database (exit 5), in one line', () => {
  // What Node's TLS socket rejects with when the other side answers in plain text.
  const tls = Object.assign(
    new Error(
      'C0B7:error:0A00010B:SSL routines:ssl3_get_record:wrong version number:../deps/ssl_record.c:354:\n',
    ),
    { code: 'ERR_SSL_WRONG_VERSION_NUMBER' },
  );
  expect(describeFailure(tls, 'sluice')).toEqual({
    exitCode: EXIT_CODES.unreachable,
    code: 'SLUICE_DATABASE_UNREACHABLE',
    message: `cannot reach the database: ${tls.message.trim()}`,
  });
});

test('a socket code shaped like a SQLSTATE (EPIPE) is still a socket failure: the database cannot be reached (exit 5)', () => {
  const pipe = Object.assign(new Error('write EPIPE'), { code: 'EPIPE' });
  expect(describeFailure(pipe, 'sluice')).toEqual({
    exitCode: EXIT_CODES.unreachable,
    code: 'SLUICE_DATABASE_UNREACHABLE',
    message: 'cannot reach the database: write EPIPE',
  });
});

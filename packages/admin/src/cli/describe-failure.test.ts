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

import { expect, test } from 'vitest';
import { demoLogger } from './log.js';

test('demoLogger: one line per message, a dead consumer said plainly, per-attempt messages left out', () => {
  const lines: string[] = [];
  const logger = demoLogger((line) => lines.push(line));
  logger.warn(
    { consumer: 'mailer', eventId: 7n, attempts: 1, maxAttempts: 3, error: '451 greylisted' },
    'handler failed; the event will be retried',
  );
  logger.warn(
    { consumer: 'mailer', eventId: 7n, error: '550' },
    'skipped an event into dead_letters (skipApplyErrors)',
  );
  logger.debug({ consumer: 'mailer' }, 'a debug message');
  logger.warn(
    {
      consumer: 'order-stats',
      eventId: 12n,
      attempts: 3,
      maxAttempts: 3,
      error: 'bad amount\n  on two lines',
    },
    'handler failed at maxAttempts: consumer is dead',
  );
  logger.error(
    { consumer: 'order-stats', maxRearmCount: 3, lastError: null },
    'dead consumer has used up its re-arms',
  );
  logger.info({}, 'LISTEN reconnected');
  expect(lines).toEqual([
    '[sluice] consumer order-stats is DEAD: event 12 failed 3 attempts (bad amount on two lines); ' +
      'the other consumers go on. Diagnose it on the dashboard.',
    '[sluice] error: dead consumer has used up its re-arms {"consumer":"order-stats","maxRearmCount":3,"lastError":null}',
    '[sluice] LISTEN reconnected',
  ]);
});

import { describe, expect, test } from 'vitest';
import type { Consumer } from './consumers/consumer.js';
import { InvalidOptionError } from './errors.js';
import { resolveOptions, type DispatcherOptions } from './options.js';
import type { Sql } from './sql-types.js';

const sql = (() => undefined) as unknown as Sql;
const consumer = (name: string, extra: Partial<Consumer> = {}): Consumer => ({
  name,
  handler: () => undefined,
  ...extra,
});
const resolve = (options: Partial<DispatcherOptions>) => () =>
  resolveOptions({ sql, consumers: [consumer('a')], ...options });

describe('resolveOptions', () => {
  test('applies the documented defaults', () => {
    const options = resolveOptions({ sql, consumers: [consumer('a')] });
    expect(options).toMatchObject({
      schema: 'sluice',
      batchSize: 100,
      pollIntervalMs: 100,
      maxAttempts: 10,
      rearmCooldownMs: 300_000,
      maxRearmCount: 3,
      concurrency: 4,
      listen: true,
    });
    expect(options.consumers[0]).toMatchObject({
      instanceId: '*',
      ordering: 'fast',
      startFrom: 'beginning',
      maxAttempts: 10,
    });
  });

  test.each([
    ['duplicate consumer names', { consumers: [consumer('a'), consumer('a')] }, 'consumers[1].name'],
    [
      'a per-instance consumer without instanceId',
      { consumers: [consumer('a', { delivery: 'per-instance' })] },
      'instanceId',
    ],
    ["the shared sentinel '*' as instanceId", { instanceId: '*' }, 'instanceId'],
    ['no consumers', { consumers: [] }, 'consumers'],
    ['a zero batch size', { batchSize: 0 }, 'batchSize'],
    ['maxBatchSize below batchSize', { batchSize: 50, maxBatchSize: 10 }, 'maxBatchSize'],
    [
      "maxBatchSize below a consumer's batchSize",
      { maxBatchSize: 100, consumers: [consumer('a', { batchSize: 500 })] },
      'maxBatchSize',
    ],
    [
      "a consumer's maxBatchSize below its batchSize",
      { consumers: [consumer('a', { batchSize: 20, maxBatchSize: 5 })] },
      'consumers[0].maxBatchSize',
    ],
    ['a fractional poll interval', { pollIntervalMs: 1.5 }, 'pollIntervalMs'],
    ['concurrency below 1', { concurrency: 0 }, 'concurrency'],
    [
      'an unknown ordering',
      { consumers: [consumer('a', { ordering: 'random' as 'fast' })] },
      'consumers[0].ordering',
    ],
    [
      'a handler that is not a function',
      { consumers: [{ name: 'a', handler: 'nope' } as unknown as Consumer] },
      'consumers[0].handler',
    ],
    ['an empty consumer name', { consumers: [consumer('')] }, 'consumers[0].name'],
    [
      'a misspelt dispatcher option (pollInterval for pollIntervalMs)',
      { pollInterval: 100 } as unknown as Partial<DispatcherOptions>,
      'pollInterval',
    ],
    ['a lone surrogate in a consumer name', { consumers: [consumer('mailer\uD800')] }, 'consumers[0].name'],
    ['a NUL in a consumer name', { consumers: [consumer('a\u0000b')] }, 'consumers[0].name'],
    ['a lone surrogate in the instanceId', { instanceId: 'pod-\uDC01' }, 'instanceId'],
    [
      'maxAttempts 0',
      { consumers: [consumer('a', { errorPolicy: { maxAttempts: 0 } })] },
      'consumers[0].errorPolicy.maxAttempts',
    ],
    ['a bad schema name', { schema: 'Robert"); drop' }, 'schema'],
    // Durations a Node.js timer or PostgreSQL's timeouts cannot take (2^31 ms fires at once / is refused).
    ['a statement timeout of 2^31 ms', { statementTimeoutMs: 2 ** 31 }, 'statementTimeoutMs'],
    ['a poll interval of 2^31 ms', { pollIntervalMs: 2 ** 31 }, 'pollIntervalMs'],
    [
      'handler and statement timeouts whose sum (the idle-in-transaction timeout) is 2^31 ms',
      { handlerTimeoutMs: 2 ** 30, statementTimeoutMs: 2 ** 30 },
      'handlerTimeoutMs',
    ],
    [
      "a consumer's handler timeout that, with the statement timeout, reaches 2^31 ms",
      { consumers: [consumer('a', { handlerTimeoutMs: 2 ** 31 - 30_000 })] },
      'consumers[0].handlerTimeoutMs',
    ],
    [
      'an isFeatureEnabled that is not a function',
      { isFeatureEnabled: 'yes' as unknown as () => boolean },
      'isFeatureEnabled',
    ],
    ['a logger without its methods', { logger: {} as never }, 'logger'],
    ['a meterProvider that is not one', { meterProvider: 5 as never }, 'meterProvider'],
    ['a tracerProvider that is not one', { tracerProvider: 'x' as never }, 'tracerProvider'],
    [
      "parkKey on a per-instance consumer (a parked key is the consumer's, not an instance's)",
      {
        instanceId: 'pod-1',
        consumers: [consumer('a', { delivery: 'per-instance', errorPolicy: { parkKey: true } })],
      },
      'consumers[0].errorPolicy.parkKey',
    ],
    [
      'maxAttempts beside the handler instead of in errorPolicy',
      { consumers: [consumer('a', { maxAttempts: 1 } as Partial<Consumer>)] },
      'consumers[0].maxAttempts',
    ],
    [
      'a misspelt consumer option',
      { consumers: [consumer('a', { batchsize: 5 } as Partial<Consumer>)] },
      'consumers[0].batchsize',
    ],
    [
      'a consumer option inside errorPolicy',
      { consumers: [consumer('a', { errorPolicy: { ordering: 'strict' } as never })] },
      'consumers[0].errorPolicy.ordering',
    ],
    // The attempts columns are PostgreSQL integers: every turn of such a consumer failed on them.
    ['maxAttempts above 2^31 - 1', { maxAttempts: 2 ** 31 }, 'maxAttempts'],
    [
      "a consumer's maxAttempts above 2^31 - 1",
      { consumers: [consumer('a', { errorPolicy: { maxAttempts: 3_000_000_000 } })] },
      'consumers[0].errorPolicy.maxAttempts',
    ],
    // Refused as what was given, not as the maxBatchSize derived from it.
    ['a batchSize whose default maxBatchSize passes 2^53', { batchSize: 1e15 }, 'batchSize'],
    [
      "a consumer's batchSize above the largest",
      { consumers: [consumer('a', { batchSize: 1_000_000_001 })] },
      'consumers[0].batchSize',
    ],
    [
      'a misspelt rebuild option (form for from)',
      { consumers: [consumer('a', { version: 2, rebuild: { form: 5 } as never })] },
      'consumers[0].rebuild.form',
    ],
    [
      'an unknown field beside withinEvents',
      {
        consumers: [
          consumer('a', { version: 2, rebuild: { takeover: { withinEvents: 5, after: 1 } as never } }),
        ],
      },
      'consumers[0].rebuild.takeover',
    ],
    [
      'an unknown field in liveView',
      {
        consumers: [consumer('a', { version: 2, liveView: { view: 'v', source: 's', sorce: 't' } as never })],
      },
      'consumers[0].liveView',
    ],
    // eslint-disable-next-line no-sparse-arrays -- the hole is the case
    ['a hole in the consumers', { consumers: [, consumer('a')] as Consumer[] }, 'consumers[0]'],
  ])('rejects %s, naming the option', (_label, options, option) => {
    const attempt = resolve(options);
    expect(attempt).toThrow(InvalidOptionError);
    expect(attempt).toThrow(expect.objectContaining({ option }));
  });

  test("a consumer that is an instance of the application's class may hold fields of its own", () => {
    class Projection {
      readonly name = 'orders';
      readonly repository: object;
      constructor(repository: object) {
        this.repository = repository;
      }
      handler(): void {
        // writes through this.repository
      }
    }
    const options = resolveOptions({ sql, consumers: [new Projection({})] });
    expect(options.consumers[0]?.name).toBe('orders');
  });

  test('takes the largest attempts and batch sizes the tables and numbers hold, and null as the default', () => {
    const options = resolveOptions({
      sql,
      maxAttempts: 2 ** 31 - 1,
      batchSize: 1_000_000_000,
      listen: null as never,
      countCrashedAttempts: null as never,
      consumers: [consumer('a', { errorPolicy: { maxAttempts: 2 ** 31 - 1 } })],
    });
    expect(options.consumers[0]).toMatchObject({
      maxAttempts: 2 ** 31 - 1,
      batchSize: 1_000_000_000,
      maxBatchSize: 10_000_000_000,
    });
    expect(options).toMatchObject({ listen: true, countCrashedAttempts: true });
  });

  test('says where a misplaced error-policy option belongs', () => {
    expect(resolve({ consumers: [consumer('a', { maxAttempts: 1 } as Partial<Consumer>)] })).toThrow(
      'Invalid option `consumers[0].maxAttempts`: is not an option of a consumer: it belongs in errorPolicy ({ errorPolicy: { maxAttempts: … } })',
    );
  });

  test('accepts an age beyond a timer, a callable logger and null providers (the global ones)', () => {
    const log = Object.assign(() => undefined, {
      debug: () => undefined,
      info: () => undefined,
      warn: () => undefined,
      error: () => undefined,
    });
    const options = resolveOptions({
      sql,
      consumers: [consumer('a')],
      rearmCooldownMs: 30 * 86_400_000,
      logger: log,
      meterProvider: null as never,
      tracerProvider: null as never,
    });
    expect(options.rearmCooldownMs).toBe(2_592_000_000);
    expect(resolve({ rearmCooldownMs: 315_360_000_001 })).toThrow(
      expect.objectContaining({ option: 'rearmCooldownMs' }),
    );
  });

  test('does not mutate the caller’s options', () => {
    const input = { sql, consumers: [consumer('a')] };
    const frozen = JSON.stringify(input);
    resolveOptions(input);
    expect(JSON.stringify(input)).toBe(frozen);
  });
});

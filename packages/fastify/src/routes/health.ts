import { settleWithin, TIMED_OUT } from '@sluice/core/internal';
import type { FastifyInstance } from 'fastify';
import { NO_PARAMETERS } from '../json.js';
import { errorResponses, health } from '../schemas.js';
import type { OpsContext } from './context.js';

const STAGNATION_MS = 5 * 60_000;

/**
 * How long /health waits for the database: a database that does not answer at all (a pooler
 * paused, a network gone silent) is "down" after this, not a probe left hanging until it answers.
 */
export const HEALTH_READ_MS = 5_000;

/**
 * Readiness and a summary for alerting: 503 when the dispatcher is not running or the database
 * cannot be read; 200 otherwise, with status 'degraded' when a consumer is dead or stagnating
 * (behind and not advancing for 5 min) or LISTEN is down (delivery falls back to polling).
 */
export function healthRoutes(
  app: FastifyInstance,
  { admin, dispatcher, isRunning, listenExpected }: OpsContext,
): void {
  app.get('/health', {
    schema: { querystring: NO_PARAMETERS, response: { 200: health, 503: health, ...errorResponses } },
    handler: async (request, reply) => {
      const running = isRunning();
      let consumers;
      try {
        // The read is left to settle on its own (a late failure is nobody's to report).
        const read = await settleWithin(admin.listConsumers(), HEALTH_READ_MS);
        if (read === TIMED_OUT) {
          request.log.warn({ waitedMs: HEALTH_READ_MS }, 'sluice health: the database did not answer');
          return await reply.code(503).send({
            status: 'down',
            running,
            listenConnected: dispatcher.listenConnected,
            message: `the database did not answer within ${HEALTH_READ_MS} ms`,
          });
        }
        consumers = read;
      } catch (error) {
        request.log.warn({ err: error }, 'sluice health: cannot read consumer state');
        return reply.code(503).send({
          status: 'down',
          running,
          listenConnected: dispatcher.listenConnected,
          message: 'cannot read consumer state',
        });
      }
      // Stagnation is measured by the database's clock, which wrote the progress times.
      const deadConsumers = consumers.filter((c) => c.status === 'dead').map(label);
      const stagnatingConsumers = consumers
        .filter((c) => c.status !== 'dead' && c.status !== 'disabled' && c.lagEvents > 0n)
        .filter((c) => (c.stagnationSeconds ?? 0) * 1000 > STAGNATION_MS)
        .map(label);
      const maxLagEvents = consumers.reduce((max, c) => (c.lagEvents > max ? c.lagEvents : max), 0n);
      const body = {
        status: !running
          ? 'down'
          : deadConsumers.length > 0 ||
              stagnatingConsumers.length > 0 ||
              (listenExpected && !dispatcher.listenConnected)
            ? 'degraded'
            : 'ok',
        running,
        listenConnected: dispatcher.listenConnected,
        deadConsumers,
        stagnatingConsumers,
        maxLagEvents: maxLagEvents.toString(),
      };
      return reply.code(running ? 200 : 503).send(body);
    },
  });
}

function label(c: { name: string; instanceId: string }): string {
  return c.instanceId === '*' ? c.name : `${c.name}@${c.instanceId}`;
}

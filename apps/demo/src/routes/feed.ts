import type { FastifyInstance } from 'fastify';
import type { liveFeed } from '../consumers/live-feed.js';

/** Server-Sent Events from the per-instance `live-feed` consumer. */
export function feedRoutes(app: FastifyInstance, feed: ReturnType<typeof liveFeed>): void {
  const closers = new Set<() => void>();
  app.addHook('onClose', () => {
    for (const close of closers) close();
  });

  app.get('/feed', (request, reply) => {
    reply.hijack();
    const res = reply.raw;
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    });
    res.write(': connected to the sluice live feed\n\n');
    const unsubscribe = feed.subscribe((event) => {
      const data = JSON.stringify({
        id: event.id.toString(),
        type: event.type,
        streamId: event.streamId,
        data: event.data,
      });
      res.write(`id: ${event.id}\nevent: ${event.type}\ndata: ${data}\n\n`);
    });
    const heartbeat = setInterval(() => res.write(': keep-alive\n\n'), 15_000);
    const close = () => {
      clearInterval(heartbeat);
      unsubscribe();
      closers.delete(close);
      res.end();
    };
    closers.add(close);
    request.raw.on('close', close);
  });
}

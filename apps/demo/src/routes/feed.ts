import type { FastifyInstance } from 'fastify';
import type { liveFeed } from '../consumers/live-feed.js';

/** A browser that reads slower than events come is let go once this much waits for it. */
const MAX_BUFFERED_BYTES = 1024 * 1024;

/** Server-Sent Events from the per-instance `live-feed` consumer. */
export function feedRoutes(app: FastifyInstance, feed: ReturnType<typeof liveFeed>): void {
  const closers = new Set<() => void>();
  // Before the server closes: it waits for every connection, and a reader's stream never ends by
  // itself (at onClose, a Ctrl+C with a reader connected would wait for ever).
  app.addHook('preClose', () => {
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
    // Node buffers what a slow reader has not taken yet without limit: past the limit, the reader
    // is let go (it reconnects, as EventSource does) instead of the buffer growing.
    const send = (text: string) => {
      if (res.writableLength > MAX_BUFFERED_BYTES) close();
      else res.write(text);
    };
    const unsubscribe = feed.subscribe((event) => {
      const data = JSON.stringify({
        id: event.id.toString(),
        type: event.type,
        streamId: event.streamId,
        data: event.data,
      });
      // A line break in the type would end the field and start another: the event name is one line.
      send(`id: ${event.id}\nevent: ${event.type.replace(/[\r\n]/g, ' ')}\ndata: ${data}\n\n`);
    });
    const heartbeat = setInterval(() => {
      send(': keep-alive\n\n');
    }, 15_000);
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

import { context, trace, type TracerProvider } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { defaultResource, resourceFromAttributes } from '@opentelemetry/resources';
import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, ConsoleSpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { FastifyInstance } from 'fastify';
import { CONTENT_TYPES, negotiate, serialize } from './exposition.js';

/** The service name on the demo's metrics (`target_info{service_name="sluice-demo"}`). */
export const SERVICE_NAME = 'sluice-demo';

/** Collects when /metrics is scraped: the pull model, nothing exported in between. */
class ScrapeReader extends MetricReader {
  protected override onShutdown(): Promise<void> {
    return Promise.resolve();
  }
  protected override onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
}

/**
 * Prometheus metrics served by the app itself (no second HTTP server), as OpenMetrics or the
 * Prometheus text format, whichever the scraper's Accept header prefers (see exposition.ts).
 */
export function createMetrics(instanceId: string) {
  const reader = new ScrapeReader();
  const meterProvider = new MeterProvider({
    // The SDK's own attributes (telemetry.sdk.*), plus who this is.
    resource: defaultResource().merge(
      resourceFromAttributes({ 'service.name': SERVICE_NAME, 'service.instance.id': instanceId }),
    ),
    readers: [reader],
  });
  return {
    meterProvider,
    routes(app: FastifyInstance) {
      app.get('/metrics', async (request, reply) => {
        const format = negotiate(request.headers.accept);
        const { resourceMetrics, errors } = await reader.collect();
        for (const error of errors) request.log.warn({ err: error }, 'a metric callback failed');
        return reply
          .header('content-type', CONTENT_TYPES[format])
          .header('vary', 'accept')
          .send(serialize(resourceMetrics, format));
      });
    },
    shutdown: () => meterProvider.shutdown(),
  };
}

/**
 * With DEMO_TRACES=console, spans go to the console: one per HTTP request, the append inside it
 * records its traceparent, and each handler span links back to it.
 */
export function createTracing(enabled: boolean): {
  tracerProvider: TracerProvider | undefined;
  routes(app: FastifyInstance): void;
} {
  if (!enabled) return { tracerProvider: undefined, routes: () => undefined };
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  const tracerProvider = new BasicTracerProvider({
    spanProcessors: [new SimpleSpanProcessor(new ConsoleSpanExporter())],
  });
  trace.setGlobalTracerProvider(tracerProvider);
  const tracer = tracerProvider.getTracer('sluice-demo');
  return {
    tracerProvider,
    routes(app) {
      app.addHook('onRequest', (request, reply, done) => {
        const span = tracer.startSpan(`${request.method} ${request.url}`);
        reply.raw.on('finish', () => {
          span.end();
        });
        context.with(trace.setSpan(context.active(), span), done);
      });
    },
  };
}

import { context, trace, type TracerProvider } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, ConsoleSpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { FastifyInstance } from 'fastify';

/** Prometheus metrics served by the app itself (no second HTTP server). */
export function createMetrics() {
  const exporter = new PrometheusExporter({ preventServerStart: true });
  const meterProvider = new MeterProvider({ readers: [exporter] });
  return {
    meterProvider,
    routes(app: FastifyInstance) {
      app.get('/metrics', (request, reply) => {
        reply.hijack();
        exporter.getMetricsRequestHandler(request.raw, reply.raw);
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

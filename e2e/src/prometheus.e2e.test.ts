// The demo's /metrics under Prometheus's own tools (Debian's prometheus package): `promtool check
// metrics` lints what curl gets, and a real Prometheus server scrapes it every second.
// It asks for OpenMetrics and reads it with its own parser, so an exposition it cannot parse marks
// the target down; then a PromQL query for a consumer that lags answers what Sluice's ops routes
// report, and the handler-duration histogram answers a quantile.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildApp, OPS_PREFIX } from '@sluice/demo/app';
import { until } from '@sluice/testing';
import { freePort } from '@sluice/testing/processes';
import { useTestDatabase } from '@sluice/testing/vitest';
import { expect, onTestFinished, test } from 'vitest';

const PROMETHEUS = process.env['PROMETHEUS_PATH'] ?? 'prometheus';
const PROMTOOL = process.env['PROMTOOL_PATH'] ?? 'promtool';
const hasPrometheus = spawnSync(PROMETHEUS, ['--version']).status === 0;
const hasPromtool = spawnSync(PROMTOOL, ['--version']).status === 0;
// CI installs the prometheus package and sets SLUICE_REQUIRE_PROMETHEUS: there a missing tool fails the run.
if ((!hasPrometheus || !hasPromtool) && process.env['SLUICE_REQUIRE_PROMETHEUS']) {
  throw new Error(
    `no ${hasPrometheus ? PROMTOOL : PROMETHEUS}: install Debian's prometheus package (or set PROMETHEUS_PATH and PROMTOOL_PATH)`,
  );
}

const db = await useTestDatabase();
const PASSWORD = 'e2e-ops-password';
const ops = { authorization: `Basic ${Buffer.from(`ops:${PASSWORD}`).toString('base64')}` };
const OPENMETRICS = 'application/openmetrics-text; version=1.0.0; charset=utf-8';

/** A Prometheus server of this test: scrapes `target` every second, stopped (by its pid) after the test. */
async function startPrometheus(
  target: string,
): Promise<{ api: (path: string) => Promise<unknown>; log: () => string }> {
  const dir = await mkdtemp(join(tmpdir(), 'sluice-prometheus-'));
  onTestFinished(() => rm(dir, { recursive: true, force: true }));
  const config = join(dir, 'prometheus.yml');
  await writeFile(
    config,
    [
      'global:',
      '  scrape_interval: 1s',
      '  scrape_timeout: 1s',
      '  evaluation_interval: 1s',
      'scrape_configs:',
      '  - job_name: sluice-demo',
      '    static_configs:',
      `      - targets: ['${target}']`,
      '',
    ].join('\n'),
  );
  const port = await freePort();
  const child: ChildProcess = spawn(
    PROMETHEUS,
    [
      `--config.file=${config}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--log.level=warn',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let log = '';
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (log += chunk));
  const exited = once(child, 'exit');
  onTestFinished(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    process.kill(child.pid as number, 'SIGTERM');
    const timer = setTimeout(() => process.kill(child.pid as number, 'SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  });
  const base = `http://127.0.0.1:${port}`;
  return {
    log: () => log,
    async api(path) {
      if (child.exitCode !== null) throw new Error(`prometheus exited (${child.exitCode}):\n${log}`);
      const response = await fetch(`${base}${path}`).catch(() => undefined); // not listening yet
      if (!response?.ok) return undefined;
      return ((await response.json()) as { data: unknown }).data;
    },
  };
}

interface Target {
  health: string;
  lastError: string;
  scrapeUrl: string;
}
interface Vector {
  resultType: string;
  result: { metric: Record<string, string>; value: [number, string] }[];
}

test.skipIf(!hasPrometheus)(
  'Prometheus scrapes the demo in OpenMetrics and answers the consumer lag Sluice reports',
  async () => {
    const { app } = await buildApp({
      sql: db.sql,
      instanceId: 'e2e-prometheus',
      bounce: /^bounce/,
      opsPassword: PASSWORD,
      pollIntervalMs: 50,
    });
    // What each of Prometheus's scrapes was answered with.
    const served: string[] = [];
    app.addHook('onSend', async (request, reply, payload) => {
      if (request.url === '/metrics' && /Prometheus/.test(request.headers['user-agent'] ?? '')) {
        served.push(String(reply.getHeader('content-type')));
      }
      return payload;
    });
    onTestFinished(() => app.close());
    await app.listen({ port: 0, host: '127.0.0.1' });
    const demo = `127.0.0.1:${(app.server.address() as AddressInfo).port}`;
    const prometheus = await startPrometheus(demo);

    let target: Target | undefined;
    await until(
      async () => {
        const targets = (await prometheus.api('/api/v1/targets')) as { activeTargets: Target[] } | undefined;
        target = targets?.activeTargets.find((t) => t.scrapeUrl === `http://${demo}/metrics`);
        return target?.health === 'up' ? target : undefined;
      },
      60_000,
      () => `the demo target to be up (${JSON.stringify(target)}); prometheus log:\n${prometheus.log()}`,
      200,
    );
    expect(served.length).toBeGreaterThan(0);
    expect(new Set(served)).toEqual(new Set([OPENMETRICS]));

    // The mailer, disabled, falls behind by every order placed from now on.
    const disabled = await app.inject({
      method: 'POST',
      url: `${OPS_PREFIX}/consumers/mailer/disable`,
      headers: ops,
      payload: { reason: 'e2e: let it lag' },
    });
    expect(disabled.statusCode, disabled.body).toBe(200);
    for (const customer of ['ada', 'grace', 'edsger', 'barbara', 'donald']) {
      const placed = await app.inject({
        method: 'POST',
        url: '/orders',
        payload: {
          customer: `${customer}@example.com`,
          items: [{ sku: 'TEA-1', quantity: 1, priceCents: 450 }],
        },
      });
      expect(placed.statusCode).toBe(201);
    }
    const reported = async () =>
      Number(
        (await app.inject({ method: 'GET', url: `${OPS_PREFIX}/consumers/mailer`, headers: ops })).json<{
          lagEvents: string;
        }>().lagEvents,
      );
    await until(
      async () => ((await reported()) >= 5 ? true : undefined),
      60_000,
      () => 'the mailer to lag five events',
      200,
    );

    let answer: Vector | undefined;
    const lag = await until(
      async () => {
        const query = encodeURIComponent('sluice_consumer_lag{sluice_consumer_name="mailer"}');
        answer = (await prometheus.api(`/api/v1/query?query=${query}`)) as Vector | undefined;
        const [sample, ...more] = answer?.result ?? [];
        if (!sample || more.length > 0) return undefined;
        const value = Number(sample.value[1]);
        return value === (await reported()) ? { value, labels: sample.metric } : undefined;
      },
      60_000,
      () => `Prometheus to answer the lag Sluice reports (${JSON.stringify(answer)})`,
      200,
    );
    expect(lag.value).toBeGreaterThanOrEqual(5);
    expect(lag.labels).toMatchObject({
      __name__: 'sluice_consumer_lag',
      job: 'sluice-demo',
      instance: demo,
      sluice_consumer_instance_id: '*',
      otel_scope_name: '@sluice/core',
    });

    // The handler durations of the projection that kept up, as seconds-sized buckets PromQL can read.
    const quantile = await until(
      async () => {
        const query = encodeURIComponent(
          'histogram_quantile(0.5, sum by (le) (sluice_handler_duration_seconds_bucket{sluice_consumer_name="order-stats"}))',
        );
        const median = ((await prometheus.api(`/api/v1/query?query=${query}`)) as Vector | undefined)
          ?.result[0];
        return median ? Number(median.value[1]) : undefined;
      },
      60_000,
      () => 'a median handler duration',
      200,
    );
    expect(quantile).toBeGreaterThan(0);
    expect(quantile).toBeLessThan(30);

    const info = (await prometheus.api(`/api/v1/query?query=${encodeURIComponent('target_info')}`)) as Vector;
    expect(info.result[0]?.metric).toMatchObject({ service_name: 'sluice-demo' });
    expect(target?.lastError).toBe('');
  },
);

test.skipIf(!hasPromtool)("promtool check metrics accepts the demo's /metrics as curl gets it", async () => {
  const { app } = await buildApp({
    sql: db.sql,
    instanceId: 'e2e-promtool',
    bounce: /^bounce/,
    opsPassword: PASSWORD,
    pollIntervalMs: 50,
  });
  onTestFinished(() => app.close());
  await app.listen({ port: 0, host: '127.0.0.1' });
  const metrics = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/metrics`;
  const placed = await app.inject({
    method: 'POST',
    url: '/orders',
    payload: { customer: 'ada@example.com', items: [{ sku: 'TEA-1', quantity: 1, priceCents: 450 }] },
  });
  expect(placed.statusCode).toBe(201);
  // Every family has samples once the handlers ran: the histogram, the counters, the gauges.
  const response = await until(
    async () => {
      const got = await fetch(metrics, { headers: { accept: '*/*' } });
      const body = await got.text();
      return body.includes('sluice_handler_duration_seconds_bucket') ? { got, body } : undefined;
    },
    60_000,
    () => 'handler durations in /metrics',
    200,
  );
  expect(response.got.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
  const lint = spawnSync(PROMTOOL, ['check', 'metrics'], { input: response.body, encoding: 'utf8' });
  expect({ status: lint.status, output: lint.stdout + lint.stderr }).toEqual({ status: 0, output: '' });
});

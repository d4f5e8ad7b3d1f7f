import { request } from 'node:http';

/**
 * Whether a Docker engine answers its ping within `timeoutMs`. A `docker` client on the PATH is not
 * enough: the engine behind DOCKER_HOST or /var/run/docker.sock must reply.
 */
export function isDockerReachable(timeoutMs = 1000): Promise<boolean> {
  const host = process.env['DOCKER_HOST'];
  let target: { socketPath: string } | { host: string; port: number };
  if (host === undefined || host === '') {
    target = { socketPath: '/var/run/docker.sock' };
  } else if (host.startsWith('unix://')) {
    target = { socketPath: host.slice('unix://'.length) };
  } else if (host.startsWith('tcp://')) {
    const parsed = new URL(`http://${host.slice('tcp://'.length)}`);
    target = { host: parsed.hostname, port: Number(parsed.port || 2375) };
  } else {
    return Promise.resolve(false);
  }
  return new Promise((resolve) => {
    const req = request({ ...target, path: '/_ping', method: 'GET', timeout: timeoutMs }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('timeout', () => {
      req.destroy();
    });
    req.on('error', () => {
      resolve(false);
    });
    req.end();
  });
}

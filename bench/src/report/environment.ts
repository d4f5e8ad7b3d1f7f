import { execFileSync } from 'node:child_process';
import { cpus, loadavg, release, totalmem, type } from 'node:os';

export interface Environment {
  readonly loadAverage: readonly number[];
  readonly cpuModel: string;
  readonly cores: number;
  readonly memoryGiB: number;
  readonly os: string;
  readonly node: string;
  readonly commit: string;
  /** Files with uncommitted changes in the working tree (the figures may include them). */
  readonly uncommitted: number;
}

export function collectEnvironment(repoDir: string): Environment {
  const git = (...args: string[]) => {
    try {
      return execFileSync('git', args, {
        cwd: repoDir,
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'ignore'],
      }).trim();
    } catch {
      return '';
    }
  };
  const status = git('status', '--porcelain');
  return {
    loadAverage: loadavg(),
    cpuModel: cpus()[0]?.model.trim() ?? 'unknown',
    cores: cpus().length,
    memoryGiB: totalmem() / 1024 ** 3,
    os: `${type()} ${release()}`,
    node: process.version,
    commit: git('rev-parse', '--short=12', 'HEAD') || 'unknown',
    uncommitted: status === '' ? 0 : status.split('\n').length,
  };
}

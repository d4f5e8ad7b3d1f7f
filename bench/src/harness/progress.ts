// Scenario processes count from the orchestrator's start (SLUICE_BENCH_T0, epoch ms).
export const benchStartedAt = Number(process.env['SLUICE_BENCH_T0'] ?? Date.now());

/** One progress line on stderr, with the time since the bench started (stdout carries the table). */
export function progress(message: string): void {
  const seconds = (Date.now() - benchStartedAt) / 1000;
  process.stderr.write(`[bench ${seconds.toFixed(1).padStart(6)}s] ${message}\n`);
}

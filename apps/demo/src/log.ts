import type { Logger } from '@sluice/core';

// The dispatcher's messages for one failed attempt that will be retried, and for one event copied
// to the dead letters by an error policy. Under the tour's load the mailer produces a few of them
// every second (greylisted and bouncing addresses); the dashboard shows them, the console does not.
const PER_ATTEMPT = new Set([
  'handler failed; the event will be retried',
  'skipped an event into dead_letters (skipApplyErrors)',
]);
const DEAD = 'handler failed at maxAttempts: consumer is dead';

type Fields = Record<string, unknown>;

/**
 * The logger `pnpm start` gives Sluice when Fastify's JSON log is off (DEMO_LOG unset): one plain
 * line per message worth an operator's attention, written with `writeLine`. A consumer that turns
 * dead gets a line of its own that says which event stopped it and why. Per-attempt retries and
 * dead-lettered events are left out (see PER_ATTEMPT); debug is dropped.
 */
export function demoLogger(writeLine: (line: string) => void): Logger {
  const line =
    (level: 'info' | 'warn' | 'error') =>
    (fields: object, message: string): void => {
      if (PER_ATTEMPT.has(message)) return;
      if (message === DEAD) {
        writeLine(deadLine(fields as Fields));
        return;
      }
      const extra = Object.keys(fields).length > 0 ? ` ${JSON.stringify(fields, jsonSafe)}` : '';
      writeLine(oneLine(`[sluice] ${level === 'info' ? '' : `${level}: `}${message}${extra}`));
    };
  return { debug: () => undefined, info: line('info'), warn: line('warn'), error: line('error') };
}

function deadLine(fields: Fields): string {
  const consumer = text(fields['consumer'], '?');
  const eventId = text(fields['eventId'], '?');
  const attempts = text(fields['attempts'], '?');
  const error = text(fields['error'], 'no error recorded');
  return oneLine(
    `[sluice] consumer ${consumer} is DEAD: event ${eventId} failed ${attempts} attempts (${error}); ` +
      'the other consumers go on. Diagnose it on the dashboard.',
  );
}

function text(value: unknown, missing: string): string {
  if (value === undefined || value === null) return missing;
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'bigint' || typeof value === 'boolean')
    return String(value);
  return JSON.stringify(value, jsonSafe);
}

function oneLine(line: string): string {
  return line.replace(/\s*[\r\n]+\s*/g, ' ');
}

function jsonSafe(_key: string, value: unknown): unknown {
  return typeof value === 'bigint' ? value.toString() : value;
}

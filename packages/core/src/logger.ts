/**
 * The logger Sluice writes to. Its shape is pino's (`logger.warn(fields, message)`), so a Fastify
 * or pino logger can be passed as is; the default writes one line to the console.
 */
export interface Logger {
  debug(fields: object, message: string): void;
  info(fields: object, message: string): void;
  warn(fields: object, message: string): void;
  error(fields: object, message: string): void;
}

function consoleLine(level: 'debug' | 'info' | 'warn' | 'error') {
  return (fields: object, message: string) => {
    const extra = Object.keys(fields).length > 0 ? ` ${JSON.stringify(fields, jsonSafe)}` : '';
    console[level](`[sluice] ${message}${extra}`);
  };
}

function jsonSafe(_key: string, value: unknown): unknown {
  if (typeof value === 'bigint') return value.toString();
  if (value instanceof Error) return { name: value.name, message: value.message };
  return value;
}

/** Console logger without debug output. */
export const consoleLogger: Logger = {
  debug: () => undefined,
  info: consoleLine('info'),
  warn: consoleLine('warn'),
  error: consoleLine('error'),
};

/** Discards everything; for tests that assert on behaviour, not on log lines. */
export const silentLogger: Logger = {
  debug: () => undefined,
  info: () => undefined,
  warn: () => undefined,
  error: () => undefined,
};

/**
 * `logger` with each call's throw dropped. A line Sluice logs is never worth a turn: a logger that
 * throws (a closed stream, a field it cannot serialise) would otherwise turn a handler's counted
 * failure into a failure of the turn itself, retried for ever.
 */
export function neverThrowing(logger: Logger): Logger {
  // Its methods as JavaScript may have them (pino's return nothing; another's a promise).
  const loose = logger as unknown as Record<keyof Logger, (fields: object, message: string) => unknown>;
  const at =
    (level: keyof Logger) =>
    (fields: object, message: string): void => {
      try {
        // A logger may be async: its rejection is dropped too, not left unhandled.
        const returned = loose[level](fields, message);
        if (returned instanceof Promise) returned.catch(() => undefined);
      } catch {
        // Dropped: see above.
      }
    };
  return { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

import { InvalidOptionError } from '@sluice/core';

/**
 * A UTF-16 surrogate that is not half of a pair: such a string has no UTF-8 form, so PostgreSQL
 * would store it altered (text) or refuse it (jsonb).
 */
const UNPAIRED_SURROGATE = /\p{Surrogate}/u;

/** A consumer name or instance id as stored: 1–200 bytes, no NUL (PostgreSQL text cannot hold it). */
export function checkName(value: unknown, option: string): string {
  if (
    typeof value !== 'string' ||
    value === '' ||
    value.includes('\u0000') ||
    UNPAIRED_SURROGATE.test(value) ||
    Buffer.byteLength(value) > 200
  ) {
    throw new InvalidOptionError(
      option,
      'must be a non-empty string of at most 200 bytes without NUL characters or unpaired UTF-16 surrogates',
    );
  }
  return value;
}

/** An instance id given or not. */
export function optionalName(value: unknown): string | undefined {
  return value === undefined ? undefined : checkName(value, 'instanceId');
}

const MAX_ID = 2n ** 63n - 1n;

/** An event id: a positive bigint within int8. */
export function checkEventId(value: unknown, option = 'eventId'): bigint {
  if (typeof value !== 'bigint' || value < 1n || value > MAX_ID) {
    throw new InvalidOptionError(option, 'must be a bigint event id between 1 and 2^63-1');
  }
  return value;
}

/** Parses a decimal event id given as text (HTTP, CLI): digits only, no sign, no exponent. */
export function parseEventId(value: unknown, option = 'eventId'): bigint {
  if (typeof value === 'bigint') return checkEventId(value, option);
  if (typeof value !== 'string' || !/^[0-9]{1,19}$/.test(value)) {
    throw new InvalidOptionError(option, 'must be a positive integer event id (digits only)');
  }
  return checkEventId(BigInt(value), option);
}

export function checkLimit(value: unknown, option = 'limit', max = 1000): number {
  if (value === undefined) return 100;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1 || value > max) {
    throw new InvalidOptionError(option, `must be an integer between 1 and ${max}`);
  }
  return value;
}

export function checkText(value: unknown, option: string, maxBytes = 1000): string | undefined {
  if (value === undefined) return undefined;
  if (
    typeof value !== 'string' ||
    value.includes('\u0000') ||
    UNPAIRED_SURROGATE.test(value) ||
    Buffer.byteLength(value) > maxBytes
  ) {
    throw new InvalidOptionError(
      option,
      `must be a string of at most ${maxBytes} bytes without NUL characters or unpaired UTF-16 surrogates`,
    );
  }
  return value;
}

/** Who acts and why, as the audit records them: checked before anything reaches the database. */
export function checkActor(
  options: { readonly actor?: unknown; readonly reason?: unknown },
  defaultActor: string,
): { readonly actor: string; readonly reason: string | null } {
  const reason = checkText(options.reason, 'reason') ?? null;
  return { actor: checkActorName(options.actor, 'actor') ?? defaultActor, reason };
}

/** An actor as the audit records it: 1 to 200 bytes (an empty one would name nobody). */
export function checkActorName(value: unknown, option: string): string | undefined {
  if (value === '') throw new InvalidOptionError(option, 'must not be empty: it names who acts in the audit');
  return checkText(value, option, 200);
}

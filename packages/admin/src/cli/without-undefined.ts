/**
 * Drops the keys whose value is undefined, so optional options can be passed on under
 * exactOptionalPropertyTypes (an absent option stays absent rather than `undefined`).
 */
export function withoutUndefined<T extends Record<string, unknown>>(
  object: T,
): { [K in keyof T]?: Exclude<T[K], undefined> } {
  return Object.fromEntries(Object.entries(object).filter(([, value]) => value !== undefined)) as {
    [K in keyof T]?: Exclude<T[K], undefined>;
  };
}

// Named phases of the long tests (the chaos run, the races): a phase is a step of the test's body
// with a name, so that a failure says which step it was in.

/**
 * Runs one named phase of a test and returns what it returns; an error thrown in it (a failed check
 * too) has the phase's name in front of its message: `load with faults: …`.
 */
export async function phase<T>(name: string, body: () => Promise<T> | T): Promise<T> {
  try {
    return await body();
  } catch (error) {
    if (error instanceof Error && !error.message.startsWith(`${name}: `))
      error.message = `${name}: ${error.message}`;
    throw error;
  }
}

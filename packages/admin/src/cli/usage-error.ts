/** The command line itself is wrong (exit code 2): unknown command or option, missing or malformed value. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

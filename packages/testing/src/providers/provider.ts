/** A running PostgreSQL server that tests may create databases on. */
export interface PostgresServer {
  /** Connection URL of a database the tests may use to create and drop others. */
  readonly url: string;
  /** Where the server came from. */
  readonly source: 'env' | 'container' | 'embedded';
  /** Stops the server (a no-op for DATABASE_URL) and removes what it created. Idempotent. */
  stop(): Promise<void>;
}

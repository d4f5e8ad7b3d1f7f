// What the global setup hands to test files through vitest's provide/inject.
declare module 'vitest' {
  export interface ProvidedContext {
    /** URL of the run's PostgreSQL server (its maintenance database). */
    sluiceServerUrl: string;
    /** The migrated database every test file clones. */
    sluiceTemplateDatabase: string;
  }
}

export {};

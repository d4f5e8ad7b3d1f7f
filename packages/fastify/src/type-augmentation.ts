import type { Admin } from '@sluice/admin';
import type { AppendOptions, Dispatcher, EventRecord, NewEvent, TransactionSql } from '@sluice/core';

/** What `app.sluice` holds. */
export interface SluiceDecorator {
  readonly dispatcher: Dispatcher;
  readonly admin: Admin;
  /** The Sluice schema the plugin was registered with. */
  readonly schema: string;
  /** append() into this plugin's schema, inside the caller's transaction. */
  append(
    tx: TransactionSql,
    events: readonly NewEvent<object>[],
    options?: Omit<AppendOptions, 'schema'>,
  ): Promise<EventRecord[]>;
  /**
   * Runs `fn` in a transaction on the plugin's pool and wakes dispatchers after the commit:
   * this process's at once, others by one coalesced NOTIFY (docs/design.md §3.3).
   */
  transaction<T>(fn: (tx: TransactionSql) => Promise<T>): Promise<T>;
}

declare module 'fastify' {
  interface FastifyInstance {
    sluice: SluiceDecorator;
  }
  interface FastifyRequest {
    /** Ops routes: who the auth hook says is acting (recorded in the audit). */
    sluiceActor: string;
  }
  interface FastifyContextConfig {
    /** Ops route that changes state: answers 405 in read-only mode. */
    write?: boolean;
    /**
     * The dashboard's page shell (page, stylesheet, scripts; no data): served without credentials
     * when the browser could not supply them (a bearer-token `ops.auth`).
     */
    shell?: boolean;
  }
}

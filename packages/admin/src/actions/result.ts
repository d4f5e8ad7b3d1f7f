/** What an accepted operator action did (it is also in the audit table). */
export interface ActionResult {
  readonly consumer: string;
  readonly instanceId: string;
  readonly action: string;
  readonly cursorBefore: bigint;
  readonly cursorAfter: bigint;
  readonly statusBefore: string;
  readonly statusAfter: string;
}

/** Options every action takes. */
export interface ActionOptions {
  /** Which cursor row of a per-instance consumer. */
  readonly instanceId?: string;
  /** Who acts, for the audit. @defaultValue the admin's defaultActor */
  readonly actor?: string;
  /** Free text kept in the audit. */
  readonly reason?: string;
}

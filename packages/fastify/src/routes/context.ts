import type { Admin } from '@sluice/admin';
import type { Dispatcher } from '@sluice/core';
import type { ResolvedOps } from '../options.js';

/** What the ops route files need. */
export interface OpsContext {
  readonly admin: Admin;
  readonly dispatcher: Dispatcher;
  readonly ops: ResolvedOps;
  readonly isRunning: () => boolean;
  /** LISTEN is configured: its absence degrades health. */
  readonly listenExpected: boolean;
}

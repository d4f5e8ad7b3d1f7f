import { InvalidOptionError, SchemaNotMigratedError, type Sql } from '@sluice/core';
import {
  ADMIN_DEFAULTS,
  MAX_AGE_MS,
  MAX_LOCK_TIMEOUT_MS,
  optionsObject,
  requirePool,
  resolveSchemaName,
  sqlStateOf,
  tables,
} from '@sluice/core/internal';
import { collectStaleInstances } from './actions/collect-stale-instances.js';
import { fenceGap } from './actions/fence-gap.js';
import { dropParkedKey, relane, replayParkedKey } from './actions/parked-keys.js';
import {
  abandonRebuild,
  approveRebuild,
  dropVersion,
  pauseRebuild,
  rebuildStatus,
  resumeRebuild,
} from './actions/rebuilds.js';
import { replayDeadLetters } from './actions/replay-dead-letters.js';
import { restart } from './actions/restart.js';
import { disable, enable } from './actions/set-enabled.js';
import { skip } from './actions/skip-poison.js';
import type { AdminContext } from './context.js';
import { diagnose } from './diagnose.js';
import {
  listAudit,
  listConsumers,
  listDeadLetters,
  listParkedEvents,
  listParkedKeys,
  showConsumer,
  showDeadLetter,
  showEvent,
} from './read-models.js';
import { checkActorName } from './validate.js';

export interface AdminOptions {
  /** A postgres.js pool on the primary. */
  sql: Sql;
  /** @defaultValue 'sluice' */
  schema?: string;
  /** How long an action waits for a consumer's row while a turn holds it. @defaultValue 2_000 */
  lockTimeoutMs?: number;
  /** The dispatchers' rearmCooldownMs, to tell when a dead consumer re-arms. @defaultValue 300_000 */
  rearmCooldownMs?: number;
  /** The dispatchers' maxRearmCount. @defaultValue 3 */
  maxRearmCount?: number;
  /** Actor recorded in the audit when an action names none. @defaultValue 'operator' */
  defaultActor?: string;
}

/**
 * Operator actions on consumer state (docs/design.md §6.2), bound to one database and schema. Every action
 * validates its input, takes the dispatcher's own row lock, and is audited; a refused action
 * changes nothing.
 * @throws {InvalidOptionError}
 */
export function createAdmin(adminOptions: AdminOptions) {
  const options = optionsObject(adminOptions, {
    fields: ['sql', 'schema', 'lockTimeoutMs', 'rearmCooldownMs', 'maxRearmCount', 'defaultActor'],
    of: 'createAdmin()',
  });
  requirePool(options.sql);
  // The read models and actions read columns by the names PostgreSQL gives them.
  const transform = (options.sql.options as unknown as { transform?: Record<string, { from?: unknown }> })
    .transform;
  if (transform && ['column', 'value', 'row'].some((part) => transform[part]?.from !== undefined)) {
    throw new InvalidOptionError(
      'sql',
      'has a transform of the rows it reads (such as postgres.camel): give createAdmin a pool without one',
    );
  }
  const schema = resolveSchemaName(options.schema);
  const integer = (
    value: number | undefined,
    fallback: number,
    option: string,
    min: number,
    max = Infinity,
  ) => {
    const n = value ?? fallback;
    if (!Number.isSafeInteger(n) || n < min)
      throw new InvalidOptionError(option, `must be an integer of at least ${min}`);
    if (n > max) throw new InvalidOptionError(option, `must be at most ${max} (ms)`);
    return n;
  };
  const ctx: AdminContext = {
    sql: options.sql,
    schema,
    tables: tables(options.sql, schema),
    lockTimeoutMs: integer(
      options.lockTimeoutMs,
      ADMIN_DEFAULTS.lockTimeoutMs,
      'lockTimeoutMs',
      1,
      MAX_LOCK_TIMEOUT_MS,
    ),
    rearmCooldownMs: integer(
      options.rearmCooldownMs,
      ADMIN_DEFAULTS.rearmCooldownMs,
      'rearmCooldownMs',
      0,
      MAX_AGE_MS,
    ),
    maxRearmCount: integer(options.maxRearmCount, ADMIN_DEFAULTS.maxRearmCount, 'maxRearmCount', 0),
    defaultActor: checkActorName(options.defaultActor, 'defaultActor') ?? ADMIN_DEFAULTS.defaultActor,
  };
  // A missing table or schema means this database was never migrated: say so in Sluice's terms.
  const explained =
    <A extends unknown[], R>(action: (...args: A) => Promise<R>) =>
    async (...args: A): Promise<R> => {
      try {
        return await action(...args);
      } catch (error) {
        const state = sqlStateOf(error);
        if (state === '42P01' || state === '3F000') throw new SchemaNotMigratedError(schema);
        throw error;
      }
    };
  // Each method once: its options (argument `at`) are checked for fields it does not know (a
  // misspelt `forMs` would disable a consumer with no end) before the action runs.
  const method =
    <A extends unknown[], R>(
      of: string,
      action: (context: AdminContext, ...args: A) => Promise<R>,
      fields: readonly string[],
      at = 1,
    ) =>
    async (...args: A): Promise<R> => {
      // Inside the promise: a bad option rejects it, as every other failure of an action does.
      const checked: unknown[] = [...args];
      checked[at] = optionsObject(args[at] as object | undefined, { fields, of: `admin.${of}()` } as never);
      return explained(action)(ctx, ...(checked as A));
    };
  const acting = ['instanceId', 'actor', 'reason'];
  const audited = ['actor', 'reason'];
  return {
    schema,
    listConsumers: explained(() => listConsumers(ctx)),
    showConsumer: method('showConsumer', showConsumer, ['instanceId']),
    diagnose: method('diagnose', diagnose, ['instanceId']),
    restart: method('restart', restart, [...acting, 'from']),
    disable: method('disable', disable, [...acting, 'until', 'forMs']),
    enable: method('enable', enable, acting),
    skip: method('skip', skip, [...acting, 'eventId']),
    showEvent: method('showEvent', showEvent, ['eventId', 'instanceId']),
    listDeadLetters: method('listDeadLetters', listDeadLetters, ['instanceId', 'limit']),
    showDeadLetter: method('showDeadLetter', showDeadLetter, ['id', 'instanceId']),
    replayDeadLetters: method('replayDeadLetters', replayDeadLetters, [...acting, 'ids', 'limit', 'dryRun']),
    fenceGap: method('fenceGap', fenceGap, [...acting, 'eventId']),
    collectStaleInstances: method(
      'collectStaleInstances',
      collectStaleInstances,
      ['olderThanMs', 'actor'],
      0,
    ),
    listAudit: method('listAudit', listAudit, ['consumer', 'limit'], 0),
    listParkedKeys: method('listParkedKeys', listParkedKeys, ['limit']),
    listParkedEvents: method('listParkedEvents', listParkedEvents, ['key', 'limit']),
    replayParkedKey: method('replayParkedKey', replayParkedKey, [...audited, 'key']),
    dropParkedKey: method('dropParkedKey', dropParkedKey, [...audited, 'key']),
    relane: method('relane', relane, [...audited, 'lanes']),
    rebuildStatus: explained((name?: string) => rebuildStatus(ctx, name)),
    approveRebuild: method('approveRebuild', approveRebuild, [...audited, 'version', 'force']),
    pauseRebuild: method('pauseRebuild', pauseRebuild, [...audited, 'version']),
    resumeRebuild: method('resumeRebuild', resumeRebuild, [...audited, 'version']),
    abandonRebuild: method('abandonRebuild', abandonRebuild, [...audited, 'version']),
    dropVersion: method('dropVersion', dropVersion, [...audited, 'dropSource'], 2),
  };
}

export type Admin = ReturnType<typeof createAdmin>;

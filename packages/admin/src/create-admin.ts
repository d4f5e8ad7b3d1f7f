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
  // Each action's options, checked for fields it does not know (a misspelt `forMs` would disable a
  // consumer with no end) before it runs.
  const act = (action: string, fields: readonly string[]) => {
    const known = { fields, of: `admin.${action}()` };
    return <O extends object>(o: O | null | undefined): O => optionsObject(o, known as never);
  };
  const acting = ['instanceId', 'actor', 'reason'];
  const audited = ['actor', 'reason'];
  const by = {
    showConsumer: act('showConsumer', ['instanceId']),
    diagnose: act('diagnose', ['instanceId']),
    restart: act('restart', [...acting, 'from']),
    disable: act('disable', [...acting, 'until', 'forMs']),
    enable: act('enable', acting),
    skip: act('skip', [...acting, 'eventId']),
    showEvent: act('showEvent', ['eventId', 'instanceId']),
    listDeadLetters: act('listDeadLetters', ['instanceId', 'limit']),
    showDeadLetter: act('showDeadLetter', ['id', 'instanceId']),
    replayDeadLetters: act('replayDeadLetters', [...acting, 'ids', 'limit', 'dryRun']),
    fenceGap: act('fenceGap', [...acting, 'eventId']),
    collectStaleInstances: act('collectStaleInstances', ['olderThanMs', 'actor']),
    listAudit: act('listAudit', ['consumer', 'limit']),
    listParkedKeys: act('listParkedKeys', ['limit']),
    listParkedEvents: act('listParkedEvents', ['key', 'limit']),
    replayParkedKey: act('replayParkedKey', [...audited, 'key']),
    dropParkedKey: act('dropParkedKey', [...audited, 'key']),
    relane: act('relane', [...audited, 'lanes']),
    approveRebuild: act('approveRebuild', [...audited, 'version', 'force']),
    pauseRebuild: act('pauseRebuild', [...audited, 'version']),
    resumeRebuild: act('resumeRebuild', [...audited, 'version']),
    abandonRebuild: act('abandonRebuild', [...audited, 'version']),
    dropVersion: act('dropVersion', [...audited, 'dropSource']),
  };
  return {
    schema,
    listConsumers: explained(() => listConsumers(ctx)),
    showConsumer: explained((name: string, o?: Parameters<typeof showConsumer>[2]) =>
      showConsumer(ctx, name, by.showConsumer(o)),
    ),
    diagnose: explained((name: string, o?: Parameters<typeof diagnose>[2]) =>
      diagnose(ctx, name, by.diagnose(o)),
    ),
    restart: explained((name: string, o: Parameters<typeof restart>[2]) => restart(ctx, name, by.restart(o))),
    disable: explained((name: string, o?: Parameters<typeof disable>[2]) =>
      disable(ctx, name, by.disable(o)),
    ),
    enable: explained((name: string, o?: Parameters<typeof enable>[2]) => enable(ctx, name, by.enable(o))),
    skip: explained((name: string, o: Parameters<typeof skip>[2]) => skip(ctx, name, by.skip(o))),
    showEvent: explained((name: string, o: Parameters<typeof showEvent>[2]) =>
      showEvent(ctx, name, by.showEvent(o)),
    ),
    listDeadLetters: explained((name: string, o?: Parameters<typeof listDeadLetters>[2]) =>
      listDeadLetters(ctx, name, by.listDeadLetters(o)),
    ),
    showDeadLetter: explained((name: string, o: Parameters<typeof showDeadLetter>[2]) =>
      showDeadLetter(ctx, name, by.showDeadLetter(o)),
    ),
    replayDeadLetters: explained((name: string, o?: Parameters<typeof replayDeadLetters>[2]) =>
      replayDeadLetters(ctx, name, by.replayDeadLetters(o)),
    ),
    fenceGap: explained((name: string, o: Parameters<typeof fenceGap>[2]) =>
      fenceGap(ctx, name, by.fenceGap(o)),
    ),
    collectStaleInstances: explained((o: Parameters<typeof collectStaleInstances>[1]) =>
      collectStaleInstances(ctx, by.collectStaleInstances(o)),
    ),
    listAudit: explained((o?: Parameters<typeof listAudit>[1]) => listAudit(ctx, by.listAudit(o))),
    listParkedKeys: explained((name: string, o?: Parameters<typeof listParkedKeys>[2]) =>
      listParkedKeys(ctx, name, by.listParkedKeys(o)),
    ),
    listParkedEvents: explained((name: string, o: Parameters<typeof listParkedEvents>[2]) =>
      listParkedEvents(ctx, name, by.listParkedEvents(o)),
    ),
    replayParkedKey: explained((name: string, o: Parameters<typeof replayParkedKey>[2]) =>
      replayParkedKey(ctx, name, by.replayParkedKey(o)),
    ),
    dropParkedKey: explained((name: string, o: Parameters<typeof dropParkedKey>[2]) =>
      dropParkedKey(ctx, name, by.dropParkedKey(o)),
    ),
    relane: explained((name: string, o: Parameters<typeof relane>[2]) => relane(ctx, name, by.relane(o))),
    rebuildStatus: explained((name?: string) => rebuildStatus(ctx, name)),
    approveRebuild: explained((name: string, o?: Parameters<typeof approveRebuild>[2]) =>
      approveRebuild(ctx, name, by.approveRebuild(o)),
    ),
    pauseRebuild: explained((name: string, o?: Parameters<typeof pauseRebuild>[2]) =>
      pauseRebuild(ctx, name, by.pauseRebuild(o)),
    ),
    resumeRebuild: explained((name: string, o?: Parameters<typeof resumeRebuild>[2]) =>
      resumeRebuild(ctx, name, by.resumeRebuild(o)),
    ),
    abandonRebuild: explained((name: string, o?: Parameters<typeof abandonRebuild>[2]) =>
      abandonRebuild(ctx, name, by.abandonRebuild(o)),
    ),
    dropVersion: explained((name: string, version: number, o?: Parameters<typeof dropVersion>[3]) =>
      dropVersion(ctx, name, version, by.dropVersion(o)),
    ),
  };
}

export type Admin = ReturnType<typeof createAdmin>;

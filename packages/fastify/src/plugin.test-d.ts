// Type tests (checked by `pnpm typecheck`): the decoration and the options are typed.
import type { Admin } from '@sluice/admin';
import type { Dispatcher, EventRecord, TransactionSql } from '@sluice/core';
import Fastify from 'fastify';
import { expectTypeOf } from 'vitest';
import sluice, { type SluicePluginOptions } from './index.js';

const app = Fastify();
expectTypeOf(app.sluice.dispatcher).toEqualTypeOf<Dispatcher>();
expectTypeOf(app.sluice.admin).toEqualTypeOf<Admin>();
type Append = typeof app.sluice.append;
expectTypeOf<Parameters<Append>[0]>().toEqualTypeOf<TransactionSql>();
expectTypeOf<Awaited<ReturnType<Append>>>().toEqualTypeOf<EventRecord[]>();
expectTypeOf(app.sluice.transaction(() => Promise.resolve(42))).resolves.toEqualTypeOf<number>();
expectTypeOf<SluicePluginOptions['ops']>().toExtend<
  { auth?: unknown; insecure?: boolean; readOnly?: boolean } | undefined
>();
expectTypeOf(sluice).toBeFunction();

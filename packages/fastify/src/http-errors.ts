import { SluiceError, type OpsRouteErrorCode, type SluiceErrorCode } from '@sluice/core';
import { poolerHint, unreachableBy } from '@sluice/core/internal';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';

/** The one place where core error codes meet HTTP statuses (CONVENTIONS.md#errors). */
export const STATUS_BY_CODE = {
  SLUICE_INVALID_OPTION: 400,
  SLUICE_INVALID_EVENT: 400,
  SLUICE_CONSUMER_NOT_FOUND: 404,
  SLUICE_EVENT_NOT_FOUND: 404,
  SLUICE_DEAD_LETTER_NOT_FOUND: 404,
  SLUICE_KEY_NOT_PARKED: 404,
  SLUICE_REBUILD_NOT_FOUND: 404,
  SLUICE_CONSUMER_BUSY: 409,
  SLUICE_SKIP_MISMATCH: 409,
  SLUICE_BELOW_RETENTION_FLOOR: 409,
  SLUICE_BEYOND_HEAD: 409,
  SLUICE_NOT_A_GAP: 409,
  SLUICE_GAP_HELD: 409,
  SLUICE_PRUNE_BLOCKED: 409,
  SLUICE_LANE_CHANGE_IN_PROGRESS: 409,
  SLUICE_REBUILD_STATE: 409,
  SLUICE_REBUILD_NOT_READY: 409,
  SLUICE_NOT_REGISTERED: 503,
  SLUICE_DISPATCHER_STOPPED: 500,
  SLUICE_SCHEMA_NOT_MIGRATED: 503,
  SLUICE_CONNECT_TIMEOUT: 503,
  SLUICE_TRANSACTION_ABANDONED: 503,
  SLUICE_TRANSACTION_CONTROL: 500,
  SLUICE_SEQUENCE_CACHED: 500,
  SLUICE_XID_GUARD_MISSING: 500,
  SLUICE_EVENTS_NOT_STORED: 500,
  SLUICE_POSTGRES_UNSUPPORTED: 500,
  SLUICE_MIGRATION_FAILED: 500,
  SLUICE_MIGRATION_MODIFIED: 500,
} as const satisfies Record<SluiceErrorCode, number>;

/**
 * The codes the ops routes answer with themselves (not thrown by `@sluice/core`; listed with the
 * others in its ERROR_CODES), with their status, which docs/errors.md gives (http-errors.test.ts).
 */
export const OPS_STATUS_BY_CODE = {
  SLUICE_INVALID_REQUEST: 400,
  SLUICE_UNAUTHORIZED: 401,
  SLUICE_CROSS_SITE_REQUEST: 403,
  SLUICE_ROUTE_NOT_FOUND: 404,
  SLUICE_READ_ONLY: 405,
  SLUICE_UNSUPPORTED_MEDIA_TYPE: 415,
  SLUICE_DATABASE_UNAVAILABLE: 503,
  SLUICE_INTERNAL: 500,
} as const satisfies Record<OpsRouteErrorCode, number>;

export interface ErrorBody {
  statusCode: number;
  code: string;
  error: string;
  message: string;
}

const REASON: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  409: 'Conflict',
  413: 'Payload Too Large',
  415: 'Unsupported Media Type',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
};

export function errorBody(statusCode: number, code: string, message: string): ErrorBody {
  return { statusCode, code, error: REASON[statusCode] ?? 'Error', message };
}

/** Answers with one of the ops routes' own error codes, at its status. */
export function sendOpsCode(reply: FastifyReply, code: OpsRouteErrorCode, message: string): FastifyReply {
  const status = OPS_STATUS_BY_CODE[code];
  return reply.code(status).send(errorBody(status, code, message));
}

/** A request the ops routes refuse before any handler, in a step that can only throw (a body parser). */
export class OpsRequestError extends Error {
  readonly opsCode: OpsRouteErrorCode;
  constructor(opsCode: OpsRouteErrorCode, message: string) {
    super(message);
    this.name = 'OpsRequestError';
    this.opsCode = opsCode;
  }
}

/** Error handler of the ops routes: typed Sluice errors keep their code; nothing leaks a stack. */
export function sendOpsError(error: FastifyError | Error, request: FastifyRequest, reply: FastifyReply) {
  if (error instanceof SluiceError) {
    const status = STATUS_BY_CODE[error.code];
    if (status >= 500) request.log.error({ err: error }, 'sluice ops request failed');
    return reply.code(status).send(errorBody(status, error.code, error.message));
  }
  if (error instanceof OpsRequestError) return sendOpsCode(reply, error.opsCode, error.message);
  const fastifyError = error as FastifyError;
  if (fastifyError.validation) return sendOpsCode(reply, 'SLUICE_INVALID_REQUEST', fastifyError.message);
  const status = fastifyError.statusCode;
  if (status !== undefined && status >= 400 && status < 500) {
    return reply.code(status).send(errorBody(status, fastifyError.code, fastifyError.message));
  }
  // A prepared statement lost between two transactions: the pool is behind a transaction pooler.
  // Sluice's own connections stop preparing on it (logged once), so the same request goes through
  // when tried again; one the application's pool answers the same until it has prepare: false.
  const hint = poolerHint(error);
  if (hint !== undefined) {
    request.log.warn({ err: error }, 'sluice ops request: a prepared statement was lost');
    return sendOpsCode(reply, 'SLUICE_DATABASE_UNAVAILABLE', `${hint}; try again`);
  }
  // The database is down, refuses the login, or the connection went during the request: not a
  // failure of the request, and not one of Sluice's.
  if (unreachableBy(error) !== undefined) {
    // What the driver said (addresses, user names) stays in the server log.
    request.log.warn({ err: error }, 'sluice ops request: the database cannot be used');
    return sendOpsCode(
      reply,
      'SLUICE_DATABASE_UNAVAILABLE',
      'the database cannot be used now (the server log says why); try again once it is back',
    );
  }
  request.log.error({ err: error }, 'sluice ops request failed');
  return sendOpsCode(reply, 'SLUICE_INTERNAL', 'Internal error; see the server log');
}

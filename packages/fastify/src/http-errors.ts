import { SluiceError, type SluiceErrorCode } from '@sluice/core';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';

/** The one place where core error codes meet HTTP statuses (CONVENTIONS C6). */
export const STATUS_BY_CODE = {
  SLUICE_INVALID_OPTION: 400,
  SLUICE_INVALID_EVENT: 400,
  SLUICE_CONSUMER_NOT_FOUND: 404,
  SLUICE_CONSUMER_BUSY: 409,
  SLUICE_SKIP_MISMATCH: 409,
  SLUICE_BELOW_RETENTION_FLOOR: 409,
  SLUICE_BEYOND_HEAD: 409,
  SLUICE_NOT_A_GAP: 409,
  SLUICE_GAP_HELD: 409,
  SLUICE_PRUNE_BLOCKED: 409,
  SLUICE_NOT_REGISTERED: 503,
  SLUICE_SCHEMA_NOT_MIGRATED: 503,
  SLUICE_CONNECT_TIMEOUT: 503,
  SLUICE_SEQUENCE_CACHED: 500,
  SLUICE_XID_GUARD_MISSING: 500,
  SLUICE_POSTGRES_UNSUPPORTED: 500,
  SLUICE_MIGRATION_FAILED: 500,
  SLUICE_MIGRATION_MODIFIED: 500,
} as const satisfies Record<SluiceErrorCode, number>;

export interface ErrorBody {
  statusCode: number;
  code: string;
  error: string;
  message: string;
}

const REASON: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
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

/** Error handler of the ops routes: typed Sluice errors keep their code; nothing leaks a stack. */
export function sendOpsError(error: FastifyError | Error, request: FastifyRequest, reply: FastifyReply) {
  if (error instanceof SluiceError) {
    const status = STATUS_BY_CODE[error.code];
    if (status >= 500) request.log.error({ err: error }, 'sluice ops request failed');
    return reply.code(status).send(errorBody(status, error.code, error.message));
  }
  const fastifyError = error as FastifyError;
  if (fastifyError.validation) {
    return reply.code(400).send(errorBody(400, 'SLUICE_INVALID_REQUEST', fastifyError.message));
  }
  const status = fastifyError.statusCode;
  if (status !== undefined && status >= 400 && status < 500) {
    return reply.code(status).send(errorBody(status, fastifyError.code, fastifyError.message));
  }
  request.log.error({ err: error }, 'sluice ops request failed');
  return reply.code(500).send(errorBody(500, 'SLUICE_INTERNAL', 'Internal error; see the server log'));
}

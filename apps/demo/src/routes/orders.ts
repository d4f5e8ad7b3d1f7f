import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';

const orderParams = {
  type: 'object',
  properties: { id: { type: 'string', pattern: '^[0-9a-f-]{36}$' } },
  required: ['id'],
} as const;

const orderBody = {
  type: 'object',
  properties: {
    customer: { type: 'string', format: 'email', maxLength: 200 },
    items: {
      type: 'array',
      minItems: 1,
      maxItems: 20,
      items: {
        type: 'object',
        properties: {
          sku: { type: 'string', pattern: '^[A-Z0-9-]{2,32}$' },
          quantity: { type: 'integer', minimum: 1, maximum: 100 },
          priceCents: { type: 'integer', minimum: 0, maximum: 10_000_000 },
        },
        required: ['sku', 'quantity', 'priceCents'],
        additionalProperties: false,
      },
    },
  },
  required: ['customer', 'items'],
  additionalProperties: false,
} as const;

const cancelBody = {
  type: 'object',
  properties: { reason: { type: 'string', minLength: 1, maxLength: 200 } },
  additionalProperties: false,
} as const;

interface OrderRow {
  id: string;
  customer: string;
  items: unknown;
  total_cents: string;
  status: 'placed' | 'paid' | 'cancelled';
  created_at: Date;
}

/**
 * The shop's write side. Each route changes its own table and appends the matching event in the
 * same transaction (app.sluice.transaction): both commit, or neither does.
 */
export function orderRoutes(app: FastifyInstance): void {
  app.post<{ Body: { customer: string; items: { sku: string; quantity: number; priceCents: number }[] } }>(
    '/orders',
    {
      schema: { body: orderBody },
      handler: async (request, reply) => {
        const { customer, items } = request.body;
        const orderId = randomUUID();
        const totalCents = items.reduce((sum, item) => sum + item.quantity * item.priceCents, 0);
        const [event] = await app.sluice.transaction(async (tx) => {
          await tx`
          insert into shop.orders (id, customer, items, total_cents, status)
          values (${orderId}, ${customer}, ${JSON.stringify(items)}::text::jsonb, ${totalCents}, 'placed')`;
          return app.sluice.append(tx, [
            {
              streamId: `order-${orderId}`,
              type: 'OrderPlaced',
              data: { orderId, customer, items, totalCents },
            },
          ]);
        });
        return reply
          .code(201)
          .send({ id: orderId, status: 'placed', totalCents, eventId: event?.id.toString() });
      },
    },
  );

  app.post<{ Params: { id: string } }>('/orders/:id/pay', {
    schema: { params: orderParams },
    handler: async (request, reply) => {
      const { id } = request.params;
      const outcome = await app.sluice.transaction(async (tx) => {
        const [order] = await tx<
          OrderRow[]
        >`select id, status, total_cents::text from shop.orders where id = ${id} for update`;
        if (!order) return { code: 404, body: { message: `no order ${id}` } } as const;
        if (order.status !== 'placed')
          return { code: 409, body: { message: `order ${id} is ${order.status}` } } as const;
        await tx`update shop.orders set status = 'paid', updated_at = now() where id = ${id}`;
        await app.sluice.append(tx, [
          {
            streamId: `order-${id}`,
            type: 'OrderPaid',
            data: { orderId: id, amountCents: Number(order.total_cents) },
          },
        ]);
        return { code: 200, body: { id, status: 'paid' } } as const;
      });
      return reply.code(outcome.code).send(outcome.body);
    },
  });

  app.post<{ Params: { id: string }; Body: { reason?: string } | undefined }>('/orders/:id/cancel', {
    schema: { params: orderParams, body: cancelBody },
    // The reason is optional, and so is the body that carries it: none is an empty one.
    preValidation: (request, _reply, done) => {
      request.body ??= {};
      done();
    },
    handler: async (request, reply) => {
      const { id } = request.params;
      const reason = request.body?.reason ?? 'customer request';
      const outcome = await app.sluice.transaction(async (tx) => {
        const [order] = await tx<
          OrderRow[]
        >`select id, status, total_cents::text from shop.orders where id = ${id} for update`;
        if (!order) return { code: 404, body: { message: `no order ${id}` } } as const;
        if (order.status === 'cancelled')
          return { code: 409, body: { message: `order ${id} is already cancelled` } } as const;
        await tx`update shop.orders set status = 'cancelled', updated_at = now() where id = ${id}`;
        await app.sluice.append(tx, [
          {
            streamId: `order-${id}`,
            type: 'OrderCancelled',
            data: {
              orderId: id,
              reason,
              wasPaid: order.status === 'paid',
              totalCents: Number(order.total_cents),
            },
          },
        ]);
        return { code: 200, body: { id, status: 'cancelled' } } as const;
      });
      return reply.code(outcome.code).send(outcome.body);
    },
  });

  app.get<{ Params: { id: string } }>('/orders/:id', {
    schema: { params: orderParams },
    handler: async (request, reply) => {
      const [order] = await app.sluice.dispatcher.sql<OrderRow[]>`
        select id, customer, items, total_cents::text, status, created_at from shop.orders where id = ${request.params.id}`;
      if (!order) return reply.code(404).send({ message: `no order ${request.params.id}` });
      return { ...order, totalCents: Number(order.total_cents), total_cents: undefined };
    },
  });
}

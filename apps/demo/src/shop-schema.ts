import type { Sql } from '@sluice/core';

/** The shop's own tables (Sluice's live in the `sluice` schema). Idempotent. */
export async function createShopSchema(sql: Sql): Promise<void> {
  await sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(7316842)`;
    await tx`create schema if not exists shop`;
    await tx`
      create table if not exists shop.orders (
        id text primary key,
        customer text not null,
        items jsonb not null,
        total_cents bigint not null,
        status text not null check (status in ('placed', 'paid', 'cancelled')),
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now()
      )`;
    // The read model of the transactional `order-stats` consumer: one row per counter.
    await tx`
      create table if not exists shop.order_stats (
        name text primary key,
        value bigint not null default 0
      )`;
    await tx`
      insert into shop.order_stats (name)
      values ('placed'), ('paid'), ('cancelled'), ('revenue_cents'), ('refunded_cents')
      on conflict do nothing`;
    // Version 2 of `order-stats` (rebuilt beside version 1): the same counters and net revenue.
    await tx`
      create table if not exists shop.order_stats_v2 (
        name text primary key,
        value bigint not null default 0
      )`;
    await tx`
      insert into shop.order_stats_v2 (name)
      values ('placed'), ('paid'), ('cancelled'), ('revenue_cents'), ('refunded_cents'), ('net_revenue_cents')
      on conflict do nothing`;
  });
}

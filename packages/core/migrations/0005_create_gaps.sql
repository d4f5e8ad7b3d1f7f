-- Pending gap ranges (docs/design.md §5.2): ids a consumer passed without seeing, not yet delivered or
-- burnt.
-- Rows of their own rather than a jsonb list on the consumer row: with the horizon held under a
-- rollback-heavy load a consumer can hold 100k ranges, and a turn must then touch only the ranges
-- it re-fetches instead of rewriting megabytes of jsonb (measured in bench/, see docs/guarantees.md).
create table :SLUICE_SCHEMA.gaps (
  consumer_name text not null,
  instance_id text not null,
  from_id bigint not null,
  to_id bigint not null,
  -- An xid allocated after the snapshot that observed the hole; null until the next turn sets it.
  fence xid8,
  observed_at timestamptz not null default now(),
  primary key (consumer_name, instance_id, from_id),
  check (to_id >= from_id and from_id > 0),
  foreign key (consumer_name, instance_id) references :SLUICE_SCHEMA.consumers on delete cascade
);

create index gaps_fence_idx on :SLUICE_SCHEMA.gaps (consumer_name, instance_id, fence);

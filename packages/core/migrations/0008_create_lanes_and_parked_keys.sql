-- Keyed lanes and parked keys (docs/design.md §11).
--
-- A consumer run as N lanes keeps one row per lane in consumers, under the instance id '*k/N'
-- (lane k of N; a consumer of one lane keeps its row under '*'). Each lane row is a consumer row
-- like any other: cursor, pending gaps, status, attempts and its own row lock, so everything the
-- gap proof needs holds per lane unchanged.
--
-- A change of the lane count in progress: the old lanes deliver up to `barrier` and stop there;
-- once every old lane has reached it, the new lanes are created at `barrier` (switched_at), and
-- each old lane is removed once its pending gaps below the barrier are resolved.
create table :SLUICE_SCHEMA.lane_changes (
  consumer_name text primary key,
  from_lanes integer not null check (from_lanes >= 1),
  to_lanes integer not null check (to_lanes >= 1 and to_lanes <> from_lanes),
  barrier bigint not null check (barrier >= 0),
  requested_by text not null,
  requested_at timestamptz not null default now(),
  switched_at timestamptz
);

-- A key whose event used up its attempts, for a consumer whose error policy parks keys: that event
-- and every later event of the key are set aside (parked_events) while the consumer goes on with
-- the other keys, until an operator replays the key in order or drops it.
create table :SLUICE_SCHEMA.parked_keys (
  consumer_name text not null,
  key text not null,
  first_event_id bigint not null,
  error text,
  attempts integer not null,
  parked_at timestamptz not null default now(),
  -- An operator asked for the parked events to be delivered again, in order; cleared once done
  -- (the key is then no longer parked) or when one of them fails again (it stays parked).
  replay_requested_at timestamptz,
  replayed_by text,
  updated_at timestamptz not null default now(),
  primary key (consumer_name, key)
);

create index parked_keys_replay_idx on :SLUICE_SCHEMA.parked_keys (consumer_name)
  where replay_requested_at is not null;

-- The parked events, copied whole so that they stay readable and replayable after retention.
create table :SLUICE_SCHEMA.parked_events (
  consumer_name text not null,
  key text not null,
  event_id bigint not null,
  stream_id text not null,
  type text not null,
  data jsonb not null,
  metadata jsonb not null,
  event_created_at timestamptz not null,
  -- The failure that parked the key (on its first event), or null for the events set aside after it.
  error text,
  parked_at timestamptz not null default now(),
  primary key (consumer_name, key, event_id),
  foreign key (consumer_name, key) references :SLUICE_SCHEMA.parked_keys on delete cascade
);

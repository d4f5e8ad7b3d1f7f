-- One row per cursor. Shared consumers use the reserved instance id '*'; per-instance consumers use
-- the id of the process that owns the row (DESIGN §4 "Delivery modes").
create table :SLUICE_SCHEMA.consumers (
  name text not null check (name <> '' and octet_length(name) <= 200),
  instance_id text not null check (instance_id <> '' and octet_length(instance_id) <= 200),
  -- Last processed id: every id at or below it is delivered, except those listed in pending_gaps.
  cursor bigint not null default 0 check (cursor >= 0),
  status text not null default 'idle'
    check (status in ('idle', 'processing', 'dead', 'disabled')),
  attempts integer not null default 0 check (attempts >= 0),
  last_error text,
  last_error_at timestamptz,
  failure_category text,
  rearm_count integer not null default 0 check (rearm_count >= 0),
  -- Ids below the cursor that were passed without being seen: [{ "from", "to", "fence" }], ids as
  -- JSON strings (they are int8; JSON numbers lose precision above 2^53).
  pending_gaps jsonb not null default '[]' check (jsonb_typeof(pending_gaps) = 'array'),
  -- The cluster the gap fences were taken on (pg_control_system().system_identifier).
  system_identifier text,
  disabled_until timestamptz,
  disabled_reason text,
  last_seen_at timestamptz,
  last_progress_at timestamptz,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  primary key (name, instance_id)
);

-- One row per cursor. Shared consumers use the reserved instance id '*'; per-instance consumers use
-- the id of the process that owns the row (docs/design.md §4.10). The row is the consumer's
-- lock: a turn holds it FOR UPDATE SKIP LOCKED, operators take the same lock.
create table :SLUICE_SCHEMA.consumers (
  name text not null check (name <> '' and octet_length(name) <= 200),
  instance_id text not null check (instance_id <> '' and octet_length(instance_id) <= 200),
  -- Last processed id: every id at or below it is delivered, except those in the consumer's gaps
  -- (fast ordering). Strict ordering keeps its one waiting hole just above the cursor.
  cursor bigint not null default 0 check (cursor >= 0),
  status text not null default 'idle' check (status in ('idle', 'processing', 'dead', 'disabled')),
  -- Consecutive failures on stuck_event_id; reset when that event is finally handled.
  attempts integer not null default 0 check (attempts >= 0),
  stuck_event_id bigint,
  -- An operator skipped this event (it is in dead_letters): the next turn resolves it unhandled.
  skip_event_id bigint,
  last_error text,
  last_error_at timestamptz,
  failure_category text,
  -- Automatic re-arms of a dead consumer since its cursor last advanced (docs/design.md §6.1).
  rearm_count integer not null default 0 check (rearm_count >= 0),
  disabled_until timestamptz,
  disabled_reason text,
  -- Summary of the consumer's rows in gaps, so the idle pre-check never reads them (docs/design.md §4.1).
  gap_count integer not null default 0 check (gap_count >= 0),
  gaps_unfenced integer not null default 0 check (gaps_unfenced >= 0),
  gap_min_fence xid8,
  -- Transactions still running below the highest fence at the last check: while all of them run,
  -- no pending range can have gained a visible id (see runningBelow in gaps/gaps.ts).
  gap_watch xid8[] not null default '{}',
  -- A range holds an id that was visible but not delivered, or was not fully examined.
  gaps_recheck boolean not null default false,
  oldest_gap_at timestamptz,
  -- startFrom 'now': ids up to start_upto that were still in flight when the consumer was
  -- registered (invisible in start_snapshot) are delivered once start_fence has passed.
  start_snapshot pg_snapshot,
  start_fence xid8,
  start_upto bigint,
  -- The cluster the fences were taken on (pg_control_system().system_identifier).
  system_identifier text,
  last_seen_at timestamptz,
  last_progress_at timestamptz,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  primary key (name, instance_id)
);

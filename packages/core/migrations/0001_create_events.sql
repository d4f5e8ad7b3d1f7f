-- The log. `id` is the global position; docs/design.md §2.1, §3.2 and §5.3 say why every detail here
-- matters.
create table :SLUICE_SCHEMA.events (
  -- CACHE 1: a cached sequence hands ids to sessions in blocks, so ids stop following allocation
  -- order across sessions and the gap proof (docs/design.md §5.3) no longer holds. verifySchema() checks it.
  id bigint generated always as identity (cache 1) primary key,
  stream_id text not null check (stream_id <> ''),
  type text not null check (type <> ''),
  data jsonb not null check (jsonb_typeof(data) = 'object'),
  metadata jsonb not null default '{}' check (jsonb_typeof(metadata) = 'object'),
  created_at timestamptz not null default now(),
  -- The appending transaction. Always set: the statement trigger below has assigned it already.
  tx xid8 not null default pg_current_xact_id()
);

create index events_stream_id_idx on :SLUICE_SCHEMA.events (stream_id, id);

-- The appender's transaction id must exist before its event ids are drawn (docs/design.md §3.2). nextval()
-- does not assign an xid, and column defaults run before any row trigger, so a transaction whose
-- first write is this insert would otherwise draw its id while it has no xid yet; a dispatcher
-- could then record a gap fence below the writer's future xid and burn an id that later commits.
-- A statement-level BEFORE trigger runs before the first row (and its defaults) is produced, for
-- append() and for any raw INSERT or COPY alike.
create function :SLUICE_SCHEMA.assign_xid_before_ids() returns trigger
  language plpgsql
  as $$
begin
  perform pg_current_xact_id();
  return null;
end;
$$;

create trigger events_assign_xid
  before insert on :SLUICE_SCHEMA.events
  for each statement execute function :SLUICE_SCHEMA.assign_xid_before_ids();

-- Fire even under session_replication_role = replica (logical replication apply, some restores).
alter table :SLUICE_SCHEMA.events enable always trigger events_assign_xid;

-- Versions of a consumer and their rebuilds (docs/design.md §12).
--
-- A consumer declared with a `version` keeps one row here per version. The live version serves. A
-- newer version of a projection is rebuilt beside it, in consumer rows of its own (`row_name`:
-- '<name>@v<N>'; version 1 keeps the consumer's name), from the beginning of the log or a declared
-- position, and takes over once caught up: the live version's rows stop at `barrier` (the highest
-- of their cursors when the takeover began), the new version reaches it with no gap at or below
-- it, and one transaction makes it live. A consumer with side effects is never rebuilt: its
-- versions share its rows, and a new version takes them over at the position the old one reached;
-- consumers.version says which version may turn a row.
alter table :SLUICE_SCHEMA.consumers add column version integer check (version >= 1);

create table :SLUICE_SCHEMA.consumer_versions (
  consumer_name text not null,
  version integer not null check (version >= 1),
  -- rebuilding: catching up beside the live version; paused: an operator stopped its rows;
  -- waiting: a version with side effects, waiting to take over at the live version's position;
  -- taking-over: the live version stopped at `barrier` and this one catches up to it;
  -- live: serving; retired: taken over (its rows stopped, its data kept until dropped);
  -- abandoned: an operator gave the rebuild up (its rows removed); dropped: a retired version's
  -- rows removed by an operator.
  state text not null check (state in ('rebuilding', 'paused', 'waiting', 'taking-over', 'live', 'retired',
                                       'abandoned', 'dropped')),
  row_name text not null,
  side_effects boolean not null default false,
  -- The cursor its rows started at.
  start_position bigint not null default 0 check (start_position >= 0),
  -- null: an operator approves the takeover; else it takes over by itself once its rows are
  -- within this many events of the log head.
  takeover_within bigint check (takeover_within >= 0),
  barrier bigint check (barrier >= 0),
  -- A view the takeover points at this version's relation (view_source), in its transaction.
  view_name text,
  view_source text,
  changed_by text,
  created_at timestamptz not null default now(),
  state_changed_at timestamptz not null default now(),
  primary key (consumer_name, version),
  check ((view_name is null) = (view_source is null))
);

-- At most one live version, and at most one rebuild in progress, per consumer.
create unique index consumer_versions_live_idx on :SLUICE_SCHEMA.consumer_versions (consumer_name)
  where state = 'live';
create unique index consumer_versions_next_idx on :SLUICE_SCHEMA.consumer_versions (consumer_name)
  where state in ('rebuilding', 'paused', 'waiting', 'taking-over');

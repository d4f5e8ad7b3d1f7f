-- Events a consumer skipped (skipApplyErrors or an operator's skip), with the error. The event is
-- copied so a dead letter can still be read and replayed after retention prunes the log.
create table :SLUICE_SCHEMA.dead_letters (
  id bigint generated always as identity primary key,
  consumer_name text not null,
  instance_id text not null,
  event_id bigint not null,
  stream_id text not null,
  type text not null,
  data jsonb not null,
  metadata jsonb not null,
  event_created_at timestamptz not null,
  reason text not null check (reason in ('apply-error', 'operator-skip')),
  error text,
  attempts integer not null default 0,
  created_at timestamptz not null default now(),
  replay_requested_at timestamptz,
  replayed_at timestamptz,
  unique (consumer_name, instance_id, event_id)
);

-- Replays an operator requested and the consumer has not done yet (read by every idle pre-check).
create index dead_letters_replay_idx on :SLUICE_SCHEMA.dead_letters (consumer_name, instance_id, id)
  where replay_requested_at is not null and replayed_at is null;

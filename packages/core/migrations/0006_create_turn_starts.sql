-- A turn records here, in its own committed statement, that it is about to deliver a batch. A
-- handler that kills the process never reaches its turn's COMMIT, so without this record its
-- attempt would roll back with the turn and a crash loop would never reach maxAttempts (F6).
-- The turn deletes its record when it commits; a record that survives is a crashed attempt.
-- No foreign key on purpose: its check would wait for the consumer row the turn itself holds.
create table :SLUICE_SCHEMA.turn_starts (
  consumer_name text not null,
  instance_id text not null,
  first_event_id bigint not null,
  last_event_id bigint not null,
  -- Starts at first_event_id that have not committed yet (the current one included).
  started_count integer not null default 1,
  -- After a crash the consumer delivers one event per turn up to here, to pin the poison event.
  isolate_until bigint,
  updated_at timestamptz not null default now(),
  primary key (consumer_name, instance_id)
);

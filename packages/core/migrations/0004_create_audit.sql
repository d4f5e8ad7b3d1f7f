-- Every operator action: who did what to which consumer, with the cursor before and after.
create table :SLUICE_SCHEMA.audit (
  id bigint generated always as identity primary key,
  at timestamptz not null default now(),
  actor text not null,
  action text not null,
  consumer_name text,
  instance_id text,
  cursor_before bigint,
  cursor_after bigint,
  details jsonb not null default '{}'
);

create index audit_consumer_idx on :SLUICE_SCHEMA.audit (consumer_name, at);
create index audit_action_idx on :SLUICE_SCHEMA.audit (action, at);

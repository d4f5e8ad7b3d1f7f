-- The key a shared consumer's rows keep their lanes (and parked keys) by: 'streamId', 'data:<field>'
-- or 'metadata:<field>' (docs/design.md §11). A lane's cursor means something only under the key
-- it was kept by: a start that declares another key is refused rather than skip the events whose
-- key moved to a lane already past them. Null: recorded by a release from before this column (the
-- next start records its own).
alter table :SLUICE_SCHEMA.consumers add column lane_key text;

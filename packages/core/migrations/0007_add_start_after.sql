-- startFrom 'now': the events in flight when the consumer registered (ids up to start_upto that
-- start_snapshot did not see) are delivered by ordinary turns, a batch at a time, in id order.
-- start_after is how far those turns have got: every such event at or below it has been delivered
-- (null: none yet). A turn that reaches start_upto clears the start_* columns.
alter table :SLUICE_SCHEMA.consumers add column start_after bigint;

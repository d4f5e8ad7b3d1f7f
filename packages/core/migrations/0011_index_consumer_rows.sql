-- The idle pre-check reads this process's rows: the shared consumers' rows (instance ids starting
-- with '*') and its own per-instance rows. Rows of per-instance consumers whose instances are gone
-- stay until collected (collectStaleInstances), and a scan of them all grew with every instance
-- that ever ran. These indexes serve each half of the pre-check's condition.
create index consumers_shared_rows on :SLUICE_SCHEMA.consumers (name) where left(instance_id, 1) = '*';
create index consumers_instance_rows on :SLUICE_SCHEMA.consumers (instance_id);

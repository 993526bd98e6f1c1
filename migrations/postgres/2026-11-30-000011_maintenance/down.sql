ALTER TABLE gpus DROP COLUMN quarantine_reason;
ALTER TABLE agents DROP COLUMN drain_deadline;
ALTER TABLE agents DROP COLUMN cordon_reason;

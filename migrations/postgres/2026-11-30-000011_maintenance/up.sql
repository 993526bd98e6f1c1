-- Cordoned agents (no new placements), their drains, and quarantined GPUs.
ALTER TABLE agents ADD COLUMN cordon_reason TEXT;
ALTER TABLE agents ADD COLUMN drain_deadline TIMESTAMP;
ALTER TABLE gpus ADD COLUMN quarantine_reason TEXT;

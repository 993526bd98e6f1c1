DELETE FROM training_notices WHERE kind = 'resize';
ALTER TABLE training_notices DROP CONSTRAINT training_notices_kind_check;
ALTER TABLE training_notices ADD CONSTRAINT training_notices_kind_check
    CHECK (kind IN ('preempt', 'reclaim', 'drain', 'pause'));
ALTER TABLE trainings DROP COLUMN resize_count;

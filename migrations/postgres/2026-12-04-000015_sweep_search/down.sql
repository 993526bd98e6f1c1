DELETE FROM training_notices WHERE kind = 'pause';
ALTER TABLE training_notices DROP CONSTRAINT training_notices_kind_check;
ALTER TABLE training_notices ADD CONSTRAINT training_notices_kind_check
    CHECK (kind IN ('preempt', 'reclaim', 'drain'));
ALTER TABLE trainings DROP COLUMN held_by;
ALTER TABLE sweep_rungs DROP COLUMN l0;

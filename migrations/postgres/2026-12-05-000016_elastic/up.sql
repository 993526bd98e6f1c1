-- Elastic trainings that change size while running (docs/scheduling.md).

-- Times its gang was re-formed at another size.
ALTER TABLE trainings ADD COLUMN resize_count INTEGER NOT NULL DEFAULT 0;

-- A notice may now be a resize.
ALTER TABLE training_notices DROP CONSTRAINT training_notices_kind_check;
ALTER TABLE training_notices ADD CONSTRAINT training_notices_kind_check
    CHECK (kind IN ('preempt', 'reclaim', 'drain', 'pause', 'resize'));

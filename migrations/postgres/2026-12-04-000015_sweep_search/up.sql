-- ASHA that pauses and promotes, and the L0 / explained-variance frontier
-- (docs/sweeps.md).

-- A trial's L0 at a rung, beside its explained variance in value, when the
-- sweep's objective is the frontier.
ALTER TABLE sweep_rungs ADD COLUMN l0 DOUBLE PRECISION;

-- Who holds a QUEUED training back from the scheduler ('' = nobody): a
-- sweep that paused its trial at a rung until it promotes it.
ALTER TABLE trainings ADD COLUMN held_by TEXT NOT NULL DEFAULT '';

-- A notice may now be a sweep's pause.
ALTER TABLE training_notices DROP CONSTRAINT training_notices_kind_check;
ALTER TABLE training_notices ADD CONSTRAINT training_notices_kind_check
    CHECK (kind IN ('preempt', 'reclaim', 'drain', 'pause'));

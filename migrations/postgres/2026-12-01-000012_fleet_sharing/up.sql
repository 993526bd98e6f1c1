-- Sharing the fleet (docs/scheduling.md): priority classes, preemption
-- with a notice, quotas that lend, decayed usage and start-time estimates.
ALTER TABLE trainings ADD COLUMN priority_class TEXT NOT NULL DEFAULT '';
-- May run beyond its team's guarantee on idle GPUs (and be reclaimed).
ALTER TABLE trainings ADD COLUMN borrow BOOLEAN NOT NULL DEFAULT TRUE;
-- Runs beyond its team's guarantee now.
ALTER TABLE trainings ADD COLUMN borrowing BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE trainings ADD COLUMN preemption_count INTEGER NOT NULL DEFAULT 0;
-- When the current attempt was placed.
ALTER TABLE trainings ADD COLUMN attempt_time TIMESTAMP;
-- It wrote a checkpoint during the grace of an earlier notice.
ALTER TABLE trainings ADD COLUMN notice_saves BOOLEAN NOT NULL DEFAULT FALSE;

-- A notice given to an attempt's ranks (preemption, reclaim or drain):
-- which attempt, why, by whom (a training, or a drained agent), the reason its end will carry, and by when
-- it must be over. Deleted when the attempt's end is handled.
CREATE TABLE training_notices (
    training_id  TEXT PRIMARY KEY REFERENCES trainings (id) ON DELETE CASCADE,
    attempt      INTEGER NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('preempt', 'reclaim', 'drain')),
    noticed_by   TEXT NOT NULL,
    reason       TEXT NOT NULL,
    notice_time  TIMESTAMP NOT NULL,
    deadline     TIMESTAMP NOT NULL
);

ALTER TABLE team_quotas ADD COLUMN borrow_limit INTEGER;
ALTER TABLE team_quotas ADD COLUMN weight DOUBLE PRECISION;
ALTER TABLE team_quotas ADD COLUMN max_priority_class TEXT;

-- Each team's GPU-seconds, decayed with the fair-share half-life, as of
-- update_time.
CREATE TABLE team_usage (
    team         TEXT PRIMARY KEY,
    gpu_seconds  DOUBLE PRECISION NOT NULL,
    update_time  TIMESTAMP NOT NULL
);

-- The latest start (QUEUED) or end (RUNNING) estimate of a training, or
-- why there is none.
CREATE TABLE training_estimates (
    training_id  TEXT PRIMARY KEY REFERENCES trainings (id) ON DELETE CASCADE,
    start_time   TIMESTAMP,
    end_time     TIMESTAMP,
    reason       TEXT NOT NULL,
    update_time  TIMESTAMP NOT NULL
);

-- ASHA that pauses and promotes, and the L0 / explained-variance frontier
-- (docs/sweeps.md).

-- A trial's L0 at a rung, beside its explained variance in value, when the
-- sweep's objective is the frontier.
ALTER TABLE sweep_rungs ADD COLUMN l0 REAL;

-- Who holds a QUEUED training back from the scheduler ('' = nobody): a
-- sweep that paused its trial at a rung until it promotes it.
ALTER TABLE trainings ADD COLUMN held_by TEXT NOT NULL DEFAULT '';

-- A notice may now be a sweep's pause (SQLite cannot alter a CHECK: the
-- table is rebuilt; its rows are copied).
CREATE TABLE training_notices_new (
    training_id  TEXT PRIMARY KEY REFERENCES trainings (id) ON DELETE CASCADE,
    attempt      INTEGER NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('preempt', 'reclaim', 'drain', 'pause')),
    noticed_by   TEXT NOT NULL,
    reason       TEXT NOT NULL,
    notice_time  TIMESTAMP NOT NULL,
    deadline     TIMESTAMP NOT NULL
);
INSERT INTO training_notices_new SELECT * FROM training_notices;
DROP TABLE training_notices;
ALTER TABLE training_notices_new RENAME TO training_notices;

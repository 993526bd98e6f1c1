-- Elastic trainings that change size while running (docs/scheduling.md).

-- Times its gang was re-formed at another size.
ALTER TABLE trainings ADD COLUMN resize_count INTEGER NOT NULL DEFAULT 0;

-- A notice may now be a resize (SQLite cannot alter a CHECK: the table is
-- rebuilt; its rows are copied).
CREATE TABLE training_notices_new (
    training_id  TEXT PRIMARY KEY REFERENCES trainings (id) ON DELETE CASCADE,
    attempt      INTEGER NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('preempt', 'reclaim', 'drain', 'pause', 'resize')),
    noticed_by   TEXT NOT NULL,
    reason       TEXT NOT NULL,
    notice_time  TIMESTAMP NOT NULL,
    deadline     TIMESTAMP NOT NULL
);
INSERT INTO training_notices_new SELECT * FROM training_notices;
DROP TABLE training_notices;
ALTER TABLE training_notices_new RENAME TO training_notices;

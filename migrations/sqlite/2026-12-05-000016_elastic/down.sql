DELETE FROM training_notices WHERE kind = 'resize';
CREATE TABLE training_notices_old (
    training_id  TEXT PRIMARY KEY REFERENCES trainings (id) ON DELETE CASCADE,
    attempt      INTEGER NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('preempt', 'reclaim', 'drain', 'pause')),
    noticed_by   TEXT NOT NULL,
    reason       TEXT NOT NULL,
    notice_time  TIMESTAMP NOT NULL,
    deadline     TIMESTAMP NOT NULL
);
INSERT INTO training_notices_old SELECT * FROM training_notices;
DROP TABLE training_notices;
ALTER TABLE training_notices_old RENAME TO training_notices;
ALTER TABLE trainings DROP COLUMN resize_count;

-- A training's labels (key=value, set at create, never changed): kept on the
-- row for reading, and one row per label for ListTrainings' label filter.
ALTER TABLE trainings ADD COLUMN labels_json TEXT NOT NULL DEFAULT '{}';
CREATE TABLE training_labels (
    training_id  TEXT NOT NULL REFERENCES trainings (id) ON DELETE CASCADE,
    key          TEXT NOT NULL,
    value        TEXT NOT NULL,
    PRIMARY KEY (training_id, key)
);
CREATE INDEX training_labels_by_key_value ON training_labels (key, value, training_id);

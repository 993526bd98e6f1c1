-- The best checkpoint of a training (the lowest validation loss so far,
-- kept as best/ beside the steps'): at most one per training.
CREATE TABLE best_checkpoints (
    training_id      TEXT PRIMARY KEY NOT NULL REFERENCES trainings (id) ON DELETE CASCADE,
    attempt          INTEGER NOT NULL,
    step             BIGINT NOT NULL,
    path             TEXT NOT NULL,
    agent_id         TEXT NOT NULL,
    create_time      TIMESTAMP NOT NULL
);

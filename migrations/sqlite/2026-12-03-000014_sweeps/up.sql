-- Sweeps (docs/sweeps.md): a base config, a search space, a searcher and
-- an objective; the leader's searcher starts the trials. A trial is a
-- training of the sweep's team; sweep_trials says which draw it was.
CREATE TABLE sweeps (
    id              TEXT PRIMARY KEY,
    -- The team's idempotency key of CreateSweep (team/request_id), or NULL.
    request_key     TEXT UNIQUE,
    team            TEXT NOT NULL,
    creator         TEXT NOT NULL,
    display_name    TEXT NOT NULL,
    -- The base config (JSON, as trainings.config_json) and the space (JSON:
    -- config path -> { kind: [args] }, the space file's shape).
    config_json     TEXT NOT NULL,
    space_json      TEXT NOT NULL,
    searcher        TEXT NOT NULL CHECK (searcher IN ('grid', 'random', 'asha', 'median')),
    -- ASHA's reduction factor (0 for the other searchers).
    eta             REAL NOT NULL,
    seed            BIGINT NOT NULL,
    metric          TEXT NOT NULL,
    direction       TEXT NOT NULL CHECK (direction IN ('minimize', 'maximize')),
    max_trials      INTEGER NOT NULL,
    max_concurrent  INTEGER NOT NULL,
    max_gpu_hours   REAL NOT NULL,
    gpu_request_json TEXT NOT NULL,
    priority        INTEGER NOT NULL,
    priority_class  TEXT NOT NULL,
    max_restarts    INTEGER NOT NULL,
    state           TEXT NOT NULL CHECK (state IN ('RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED')),
    state_reason    TEXT NOT NULL,
    create_time     TIMESTAMP NOT NULL,
    end_time        TIMESTAMP
);
CREATE INDEX sweeps_team_idx ON sweeps (team, create_time, id);
CREATE INDEX sweeps_create_time_idx ON sweeps (create_time, id);
CREATE INDEX sweeps_state_idx ON sweeps (state);

CREATE TABLE sweep_trials (
    sweep_id     TEXT NOT NULL REFERENCES sweeps (id) ON DELETE CASCADE,
    trial_index  INTEGER NOT NULL,
    -- The searcher's draw it came from (the random searcher skips draws
    -- whose config is not valid; the grid's combination).
    draw         INTEGER NOT NULL,
    training_id  TEXT NOT NULL REFERENCES trainings (id) ON DELETE CASCADE,
    params_json  TEXT NOT NULL,
    PRIMARY KEY (sweep_id, trial_index)
);
CREATE INDEX sweep_trials_training_idx ON sweep_trials (training_id);

-- ASHA's and MEDIAN's record: a trial's objective when the searcher first
-- saw it at or past a rung (what later trials at that rung are judged by).
CREATE TABLE sweep_rungs (
    sweep_id     TEXT NOT NULL REFERENCES sweeps (id) ON DELETE CASCADE,
    trial_index  INTEGER NOT NULL,
    rung         INTEGER NOT NULL,
    step         BIGINT NOT NULL,
    value        REAL NOT NULL,
    PRIMARY KEY (sweep_id, trial_index, rung)
);

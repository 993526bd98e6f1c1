-- cohort's schema (DESIGN §5), SQLite flavour. Keep it in step with
-- ../postgres/ and with services/coordinator/src/persistence/schema.rs.
-- Times are UTC in TIMESTAMP columns (diesel stores them as ISO text);
-- booleans are 0/1 integers; JSON documents are TEXT.

CREATE TABLE agents (
    id              TEXT PRIMARY KEY,
    name            TEXT NOT NULL UNIQUE,
    host_name       TEXT NOT NULL,
    address         TEXT NOT NULL,
    version         TEXT NOT NULL,
    connected       BOOLEAN NOT NULL,
    connect_time    TIMESTAMP NOT NULL,
    last_seen_time  TIMESTAMP NOT NULL
);

CREATE TABLE gpus (
    uuid                TEXT PRIMARY KEY,
    agent_id            TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    gpu_index           INTEGER NOT NULL,
    name                TEXT NOT NULL,
    memory_total_bytes  BIGINT NOT NULL,
    compute_capability  TEXT NOT NULL,
    simulated           BOOLEAN NOT NULL,
    last_seen_time      TIMESTAMP NOT NULL,
    UNIQUE (agent_id, gpu_index)
);

CREATE TABLE trainings (
    id                TEXT PRIMARY KEY,
    request_id        TEXT UNIQUE,
    display_name      TEXT NOT NULL,
    config_json       TEXT NOT NULL,
    gpu_request_json  TEXT NOT NULL,
    state             TEXT NOT NULL CHECK (state IN ('QUEUED', 'SCHEDULED', 'RUNNING',
                          'RESTARTING', 'SUCCEEDED', 'FAILED', 'CANCELLED')),
    state_reason      TEXT NOT NULL,
    world_size        INTEGER NOT NULL,
    distributed       BOOLEAN NOT NULL,
    priority          INTEGER NOT NULL,
    attempt           INTEGER NOT NULL,
    restart_count     INTEGER NOT NULL,
    max_restarts      INTEGER NOT NULL,
    master_addr       TEXT,
    master_port       INTEGER,
    last_event_seq    BIGINT NOT NULL,
    create_time       TIMESTAMP NOT NULL,
    update_time       TIMESTAMP NOT NULL,
    start_time        TIMESTAMP,
    end_time          TIMESTAMP
);
CREATE INDEX trainings_state_idx ON trainings (state, priority);
CREATE INDEX trainings_create_time_idx ON trainings (create_time, id);

CREATE TABLE ranks (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    training_id       TEXT NOT NULL REFERENCES trainings (id) ON DELETE CASCADE,
    attempt           INTEGER NOT NULL,
    rank              INTEGER NOT NULL,
    agent_id          TEXT NOT NULL,
    gpu_uuid          TEXT NOT NULL,
    gpu_index         INTEGER NOT NULL,
    local_rank        INTEGER NOT NULL,
    local_world_size  INTEGER NOT NULL,
    pid               BIGINT,
    state             TEXT NOT NULL CHECK (state IN ('PENDING', 'RUNNING', 'SUCCEEDED',
                          'FAILED', 'STOPPED', 'LOST')),
    exit_code         INTEGER,
    signal            INTEGER,
    update_time       TIMESTAMP NOT NULL,
    UNIQUE (training_id, attempt, rank)
);
CREATE INDEX ranks_gpu_idx ON ranks (gpu_uuid, state);

CREATE TABLE training_events (
    training_id   TEXT NOT NULL REFERENCES trainings (id) ON DELETE CASCADE,
    seq           BIGINT NOT NULL,
    attempt       INTEGER NOT NULL,
    kind          TEXT NOT NULL,
    payload_json  TEXT NOT NULL,
    event_time    TIMESTAMP NOT NULL,
    PRIMARY KEY (training_id, seq)
);

CREATE TABLE state_transitions (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    training_id  TEXT NOT NULL REFERENCES trainings (id) ON DELETE CASCADE,
    attempt      INTEGER NOT NULL,
    from_state   TEXT,
    to_state     TEXT NOT NULL,
    reason       TEXT NOT NULL,
    at           TIMESTAMP NOT NULL
);
CREATE INDEX state_transitions_training_idx ON state_transitions (training_id, id);

CREATE TABLE checkpoints (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    training_id  TEXT NOT NULL REFERENCES trainings (id) ON DELETE CASCADE,
    attempt      INTEGER NOT NULL,
    step         BIGINT NOT NULL,
    path         TEXT NOT NULL,
    agent_id     TEXT NOT NULL,
    create_time  TIMESTAMP NOT NULL,
    UNIQUE (training_id, step)
);

CREATE TABLE gpu_metrics (
    id                          INTEGER PRIMARY KEY AUTOINCREMENT,
    gpu_uuid                    TEXT NOT NULL,
    agent_id                    TEXT NOT NULL,
    training_id                 TEXT,
    sample_time                 TIMESTAMP NOT NULL,
    utilization_gpu_percent     REAL,
    utilization_memory_percent  REAL,
    memory_used_bytes           BIGINT NOT NULL,
    memory_total_bytes          BIGINT NOT NULL,
    temperature_celsius         REAL,
    power_draw_watts            REAL,
    power_limit_watts           REAL,
    sm_clock_mhz                INTEGER,
    memory_clock_mhz            INTEGER,
    ecc_errors_corrected        BIGINT,
    ecc_errors_uncorrected      BIGINT,
    throttle_reasons            TEXT NOT NULL,
    simulated                   BOOLEAN NOT NULL
);
CREATE INDEX gpu_metrics_gpu_time_idx ON gpu_metrics (gpu_uuid, sample_time);
CREATE INDEX gpu_metrics_time_idx ON gpu_metrics (sample_time);

CREATE TABLE alerts (
    id           TEXT PRIMARY KEY,
    severity     TEXT NOT NULL,
    kind         TEXT NOT NULL,
    message      TEXT NOT NULL,
    agent_id     TEXT,
    gpu_uuid     TEXT,
    training_id  TEXT,
    value        REAL,
    threshold    REAL,
    raise_time   TIMESTAMP NOT NULL,
    resolve_time TIMESTAMP
);
CREATE INDEX alerts_raise_time_idx ON alerts (raise_time);

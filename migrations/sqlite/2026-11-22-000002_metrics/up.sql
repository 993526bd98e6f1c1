-- GPU telemetry history (SQLite flavour): who held the GPU (rank), the agent's name and the
-- sample time as epoch milliseconds (portable bucket arithmetic), and the
-- 1-minute rollups that outlive the raw samples. See docs/operations.md.

ALTER TABLE gpu_metrics ADD COLUMN gpu_index INTEGER NOT NULL DEFAULT 0;
ALTER TABLE gpu_metrics ADD COLUMN agent_name TEXT NOT NULL DEFAULT '';
ALTER TABLE gpu_metrics ADD COLUMN rank INTEGER;
ALTER TABLE gpu_metrics ADD COLUMN sample_ms BIGINT NOT NULL DEFAULT 0;
DROP INDEX gpu_metrics_gpu_time_idx;
DROP INDEX gpu_metrics_time_idx;
CREATE INDEX gpu_metrics_ms_idx ON gpu_metrics (sample_ms);
CREATE INDEX gpu_metrics_gpu_ms_idx ON gpu_metrics (gpu_uuid, sample_ms);

-- One row per GPU, minute and holder (training_id '' when none). Each mean
-- is over the samples that had the value; *_count says how many did, so
-- merged means stay exact.
CREATE TABLE gpu_metrics_rollup (
    gpu_uuid              TEXT NOT NULL,
    bucket_ms             BIGINT NOT NULL,
    training_id           TEXT NOT NULL DEFAULT '',
    gpu_index             INTEGER NOT NULL,
    agent_id              TEXT NOT NULL,
    agent_name            TEXT NOT NULL,
    rank                  INTEGER,
    sample_count          BIGINT NOT NULL,
    utilization_gpu_min   REAL,
    utilization_gpu_mean  REAL,
    utilization_gpu_max   REAL,
    utilization_gpu_count BIGINT NOT NULL,
    memory_used_min       BIGINT NOT NULL,
    memory_used_mean      REAL NOT NULL,
    memory_used_max       BIGINT NOT NULL,
    memory_total_bytes    BIGINT NOT NULL,
    temperature_min       REAL,
    temperature_mean      REAL,
    temperature_max       REAL,
    temperature_count     BIGINT NOT NULL,
    power_min             REAL,
    power_mean            REAL,
    power_max             REAL,
    power_count           BIGINT NOT NULL,
    PRIMARY KEY (gpu_uuid, bucket_ms, training_id)
);
CREATE INDEX gpu_metrics_rollup_ms_idx ON gpu_metrics_rollup (bucket_ms);

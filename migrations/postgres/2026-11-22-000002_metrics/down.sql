DROP TABLE gpu_metrics_rollup;
DROP INDEX gpu_metrics_gpu_ms_idx;
DROP INDEX gpu_metrics_ms_idx;
ALTER TABLE gpu_metrics DROP COLUMN sample_ms;
ALTER TABLE gpu_metrics DROP COLUMN rank;
ALTER TABLE gpu_metrics DROP COLUMN agent_name;
ALTER TABLE gpu_metrics DROP COLUMN gpu_index;
CREATE INDEX gpu_metrics_gpu_time_idx ON gpu_metrics (gpu_uuid, sample_time);
CREATE INDEX gpu_metrics_time_idx ON gpu_metrics (sample_time);

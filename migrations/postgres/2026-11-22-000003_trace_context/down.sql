ALTER TABLE trainings DROP COLUMN trace_context;

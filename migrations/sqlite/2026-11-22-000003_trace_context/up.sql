-- The W3C traceparent of the call that created the training: its lifecycle
-- spans (placed, ranks started, first step) join that trace, across
-- coordinator restarts. NULL when the creator was not traced.
ALTER TABLE trainings ADD COLUMN trace_context TEXT;

-- The last lines a rank printed before it exited (its stderr tail), kept so
-- WatchLogs can answer for a rank whose agent is gone.
ALTER TABLE ranks ADD COLUMN log_tail TEXT;

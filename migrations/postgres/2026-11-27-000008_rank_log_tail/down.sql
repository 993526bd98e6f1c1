ALTER TABLE ranks DROP COLUMN log_tail;

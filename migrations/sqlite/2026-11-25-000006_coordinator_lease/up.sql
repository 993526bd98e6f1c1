-- Kept for one schema on both backends: a coordinator on SQLite leads
-- alone (the file lock refuses a second one) and never takes this lease.
CREATE TABLE coordinator_lease (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    holder TEXT NOT NULL,
    advertise TEXT NOT NULL,
    epoch BIGINT NOT NULL,
    expires_at TIMESTAMP NOT NULL
);
INSERT INTO coordinator_lease (id, holder, advertise, epoch, expires_at)
VALUES (1, '', '', 0, '1970-01-01 00:00:00');

-- The leader lease of coordinators sharing this database: one row. The
-- leader renews expires_at; a standby takes the row once it has expired,
-- raising epoch, which every leader write checks in its own transaction.
CREATE TABLE coordinator_lease (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    holder TEXT NOT NULL,
    advertise TEXT NOT NULL,
    epoch BIGINT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
INSERT INTO coordinator_lease (id, holder, advertise, epoch, expires_at)
VALUES (1, '', '', 0, TIMESTAMPTZ '1970-01-01 00:00:00+00');

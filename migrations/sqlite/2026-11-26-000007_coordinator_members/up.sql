-- Kept for one schema on both backends: a coordinator on SQLite runs alone
-- and is its own member set.
CREATE TABLE coordinator_members (
    advertise TEXT PRIMARY KEY,
    seen_at TIMESTAMP NOT NULL
);

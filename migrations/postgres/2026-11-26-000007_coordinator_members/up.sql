-- The coordinators sharing this database, by --advertise URL: each one
-- marks itself seen at every lease tick; those seen within a few lease
-- lengths are the member set published to agents and CLIs.
CREATE TABLE coordinator_members (
    advertise TEXT PRIMARY KEY,
    seen_at TIMESTAMPTZ NOT NULL
);
